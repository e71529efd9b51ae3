"""Command-line options built from the settings dataclasses: one option per field that has a help text
(`nmt_lib.base.course.setting`), typed and checked, so that `--help` and the code share one set of
defaults."""
import argparse
import math
import typing
from dataclasses import fields


def number(kind, optional: bool = False, minimum=None, maximum=None):
    """An argparse type: a finite `kind` (int or float) from `minimum` to `maximum`; 'none' when `optional`."""
    def parse(text):
        if optional and text.lower() == "none":
            return None
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, "
                                             f"got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {text}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum:,}, got {text}")
        return value
    return parse


ALIASES = {"n_heads": ["--heads"], "n_layers": ["--layers"]}     # shorter names the command line also takes


def option(f) -> tuple[list[str], str]:
    """A setting's option strings and the name it is parsed into."""
    names = [f.metadata.get("flag", "--" + f.name.replace("_", "-")), *ALIASES.get(f.name, ())]
    return names, names[0][2:].replace("-", "_")


def add_settings(parser, cls, defaults: dict | None = None):
    """One option per field of `cls` that has a help text (`nmt_lib.base.course.setting`). An option not
    given stays out of the parsed arguments, so a run can tell what the user asked for; `defaults`
    shows where the tools differ from the dataclass (chapter 10's switches)."""
    group = parser.add_argument_group(f"{cls.__name__} (defaults in parentheses)")
    for f in fields(cls):
        if "help" not in f.metadata:
            continue
        names, dest = option(f)
        default = (defaults or {}).get(f.name, f.default)
        shown = "none" if default is None else "on" if default is True else "off" if default is False else default
        kw = dict(dest=dest, default=argparse.SUPPRESS, help=f"{f.metadata['help']} ({shown})")
        kinds = typing.get_args(f.type) or (f.type,)                  # int | None -> (int, NoneType)
        kind = next(k for k in kinds if k is not type(None))
        if kind is bool:
            group.add_argument(*names, action=argparse.BooleanOptionalAction, **kw)
        elif "choices" in f.metadata:
            group.add_argument(*names, choices=f.metadata["choices"], **kw)
        elif kind in (int, float):
            group.add_argument(*names, type=number(kind, type(None) in kinds), metavar="N", **kw)
        else:
            group.add_argument(*names, metavar="PATH", **kw)


def given(args, cls, defaults: dict | None = None) -> dict:
    """The fields of `cls` the command line set, over `defaults` (field name -> value)."""
    out = {f.name: defaults[f.name] for f in fields(cls) if f.name in (defaults or {})}
    for f in fields(cls):
        dest = option(f)[1]
        if hasattr(args, dest):
            out[f.name] = getattr(args, dest)
    return out
