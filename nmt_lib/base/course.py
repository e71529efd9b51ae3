"""How the notebooks run: quick mode, figures, headline numbers, settings fields and
optional imports. `make course` and the tests set the environment variables below; in a
plain JupyterLab session `quick`, `save_figure` and `headline` change nothing.
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


def env_flag(name: str) -> bool:
    """Whether the environment variable `name` is set to anything but 0, false, no."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def quick_mode() -> bool:
    """True in CI's quick mode (`NMT_QUICK=1`)."""
    return env_flag(QUICK_ENV)


def pick(learner, quick):
    """The learner-mode setting, or the quick one under `NMT_QUICK=1`."""
    return quick if quick_mode() else learner


def quick(settings, **smaller):
    """A recipe as written (a dict or a dataclass), or, under `NMT_QUICK=1`, with the
    `smaller` values in place: how a chapter states its settings once, as numbers."""
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
    """Record a headline number for `make course`'s summary and the book; return
    `value`. `key=True` marks those the README's chapter table shows (default: all)."""
    recorded = round(value, 4) if isinstance(value, float) else value
    _record({"name": name, "value": recorded, **({"key": True} if key else {})})
    return value


def _record(entry: dict):
    """One line of the headlines file, when `make course` asks for one."""
    if path := os.environ.get(HEADLINE_ENV):
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def record_table(name: str, table):
    """Record a small DataFrame for the README (`tools/render_tables.py` renders it);
    return `table`."""
    if os.environ.get(HEADLINE_ENV):

        def plain(v):
            if isinstance(v, float):
                return round(float(v), 4)
            return v.item() if hasattr(v, "item") else v

        rows = [
            [str(label), *(plain(table.at[label, c]) for c in table.columns)]
            for label in table.index
        ]
        _record(
            {"name": name, "columns": [str(c) for c in table.columns], "rows": rows}
        )
    return table


def setting(default, help: str, **command_line):
    """A dataclass field with its default and a help text, which the command line
    (chapter 9) makes an option: `flag` renames it, `choices` restricts its values."""
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
    """An argparse type: a `kind`, finite and at least `minimum` if one is given; 'none'
    if `optional`. Without a minimum it only parses: a setting's dataclass checks its
    value."""

    def parse(text):
        if optional and text.lower() == "none":
            return None
        try:
            value = kind(text)
        except ValueError:
            expected = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        if minimum is not None and not (math.isfinite(value) and value >= minimum):
            raise argparse.ArgumentTypeError(
                f"must be a finite number, at least {minimum}, got {text}"
            )
        return value

    return parse


def optional_import(name: str, skipping: str):
    """The module `name`, or None, saying what is skipped, when it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError:
        print(f"{name.split('.')[0]} is not installed: skipping {skipping}")
        return None
