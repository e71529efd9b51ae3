"""How the notebooks run: quick mode, figures, headline numbers, settings fields and
optional imports.

Tooling, not a lesson: `make course` and the tests set the environment variables below,
and the chapters call `quick`, `save_figure` and `headline`, which change nothing in a
plain JupyterLab session.
"""

import argparse
import dataclasses
import importlib
import json
import math
import os
from dataclasses import field
from pathlib import Path

QUICK_ENV = "NMT_QUICK"  # "1": CI's quick mode, small data and few epochs
FIG_ENV = "NMT_FIG_DIR"  # folder for figures; unset: figures are only shown
HEADLINE_ENV = "NMT_HEADLINES"  # JSON-lines file that `make course` reads back


def quick_mode() -> bool:
    """True when the notebooks run in CI's quick mode (`NMT_QUICK` set to anything but
    0/empty)."""
    return os.environ.get(QUICK_ENV, "").strip().lower() not in ("", "0", "false", "no")


def pick(learner, quick):
    """The learner-mode setting, or the quick one under `NMT_QUICK=1`."""
    return quick if quick_mode() else learner


def quick(settings, **smaller):
    """A recipe as written (`settings`: a dict or a dataclass), or, under `NMT_QUICK=1`,
    the same with the `smaller` values in place of those it names: how a chapter states
    its settings once, as numbers.
    """
    if not quick_mode():
        return settings
    if dataclasses.is_dataclass(settings):
        return dataclasses.replace(settings, **smaller)
    unknown = set(smaller) - set(settings)
    if unknown:
        raise KeyError(
            "quick() got settings the recipe does not have:"
            f" {', '.join(sorted(unknown))}"
        )
    return {**settings, **smaller}


def save_figure(fig, name: str):
    """Save `fig` as NAME.png in `$NMT_FIG_DIR` when that is set; return the path or
    None."""
    folder = os.environ.get(FIG_ENV)
    if not folder:
        return None
    if not name or "/" in name or "\\" in name:
        raise ValueError(
            f"figure name must be a plain file stem like 'length_hist', got {name!r}"
        )
    path = Path(folder) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def headline(name: str, value, key: bool = False):
    """Record a headline number for `make course`'s summary table and the book; return
    `value` unchanged.

    `key=True` marks the figures the README's one-line chapter table shows (by default,
    all of a chapter's).
    """
    path = os.environ.get(HEADLINE_ENV)
    if path:
        recorded = round(value, 4) if isinstance(value, float) else value
        with open(path, "a", encoding="utf-8") as f:
            f.write(
                json.dumps(
                    {"name": name, "value": recorded, **({"key": True} if key else {})}
                )
                + "\n"
            )
    return value


def record_table(name: str, table):
    """Record a small table (a pandas DataFrame, one row per index label) for the
    README, which `tools/render_tables.py` renders from the executed notebook; return
    `table` unchanged.
    """
    path = os.environ.get(HEADLINE_ENV)
    if path:
        plain = lambda v: (
            round(float(v), 4)
            if isinstance(v, float)
            else v.item()
            if hasattr(v, "item")
            else v
        )
        rows = [
            [str(label), *(plain(table.at[label, c]) for c in table.columns)]
            for label in table.index
        ]
        with open(path, "a", encoding="utf-8") as f:
            f.write(
                json.dumps(
                    {
                        "name": name,
                        "columns": [str(c) for c in table.columns],
                        "rows": rows,
                    }
                )
                + "\n"
            )
    return table


def setting(default, help: str, **command_line):
    """A dataclass field with its default and a help text, for the settings classes of
    later chapters.

    The command line (chapter 9) makes one option of each such field: `flag` renames the
    option, `choices` restricts its values (which `check_choices` checks); a number's
    option reads it with `number`.
    """
    return field(default=default, metadata={"help": help, **command_line})


def check_choices(settings):
    """`ValueError` for the first field of `settings` whose value is not among its
    `choices` (None is always allowed where it is the default)."""
    for f in dataclasses.fields(settings):
        value, choices = getattr(settings, f.name), f.metadata.get("choices")
        if choices and value not in choices and (value, f.default) != (None, None):
            raise ValueError(
                f"{f.name} must be one of {', '.join(choices)}, got {value!r}"
            )


def number(kind, optional: bool = False, minimum=None):
    """An argparse type: a finite `kind` (int or float), at least `minimum` if given;
    'none' when `optional`."""

    def parse(text):
        if optional and text.lower() == "none":
            return None
        try:
            value = kind(text)
        except ValueError:
            expected = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {text}")
        return value

    return parse


def optional_import(name: str, skipping: str):
    """The module `name`, or None (printing one line that says what is skipped) when it
    is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError:
        print(f"{name.split('.')[0]} is not installed: skipping {skipping}")
        return None
