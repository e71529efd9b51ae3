"""The command line's settings: what a run adds to chapter 9's `TrainSettings`, and an
option per settings field with a help text (`base.course.setting`). A setting is checked
where it is defined (`__post_init__`, `choices`); the command line only reads numbers.
"""

import argparse
import math
import typing
from dataclasses import dataclass, fields

from nmt_lib.base.course import check_choices, number, setting
from nmt_lib.base.device import PRECISIONS
from nmt_lib.training import TrainSettings

PROGRESS = ("auto", "bar", "lines", "none")  # how the trainer shows its progress
# chapter 10's switches, on in the tools, and low precision where it is native
FAST = dict(fast_dropout=True, loss="sliced", fused_adam=True, precision="auto")


@dataclass
class RunSettings(TrainSettings):
    """Chapter 9's `TrainSettings`, and what the command line adds to them."""

    max_steps: int | None = setting(
        None, "stop after this many updates (none: after the epochs)"
    )
    checkpoint_every: int = setting(500, "updates between checkpoints (0: epoch ends)")
    time_limit: float | None = setting(None, "minutes; stop, with a checkpoint, after")
    keep_last: int = setting(
        0,
        "also keep the checkpoints of the last N epoch ends, as OUT.epochE.pt, for "
        "`average` (0: none)",
    )
    loss: str = setting(
        "plain",
        "plain: F.cross_entropy on the logits; sliced: chapter 10's output layer "
        "and loss together, a slice of rows at a time",
        choices=("plain", "sliced"),
    )
    fused_adam: bool = setting(False, "chapter 10's one-kernel Adam update")
    fast_dropout: bool = setting(
        False, "chapter 10's dropout: the same statistics from cheaper random numbers"
    )
    precision: str = setting(
        "fp32",
        "auto: bf16 where the CPU or GPU computes it natively, fp16 with loss "
        "scaling on older GPUs, else fp32",
        choices=PRECISIONS,
    )

    def __post_init__(self):
        super().__post_init__()
        check_choices(self)
        if self.time_limit is not None and not (
            math.isfinite(self.time_limit) and self.time_limit > 0
        ):
            raise ValueError(
                f"time_limit must be a positive number, got {self.time_limit}"
            )
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        for name in ("checkpoint_every", "keep_last"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


ALIASES = {"n_heads": ["--heads"], "n_layers": ["--layers"]}  # shorter names too


def option(f) -> tuple[list[str], str]:
    """A setting's option strings and the name it is parsed into."""
    names = [f.metadata.get("flag", "--" + f.name.replace("_", "-"))]
    names += ALIASES.get(f.name, [])
    return names, names[0][2:].replace("-", "_")


def add_settings(parser, cls, defaults: dict | None = None):
    """One option per field of `cls` with a help text; one not given stays out of the
    parsed arguments. `defaults` shows where the tools differ from the dataclass."""
    group = parser.add_argument_group(f"{cls.__name__} (defaults in parentheses)")
    for f in fields(cls):
        if "help" not in f.metadata:
            continue
        names, dest = option(f)
        default = (defaults or {}).get(f.name, f.default)
        shown = default
        if default is None or isinstance(default, bool):
            shown = {None: "none", True: "on", False: "off"}[default]
        kw = dict(dest=dest, default=argparse.SUPPRESS)
        kw["help"] = f"{f.metadata['help']} ({shown})"
        kinds = typing.get_args(f.type) or (f.type,)  # int | None -> (int, NoneType)
        kind = next(k for k in kinds if k is not type(None))
        if kind is bool:
            group.add_argument(*names, action=argparse.BooleanOptionalAction, **kw)
        elif "choices" in f.metadata:
            metavar = "{" + ",".join(f.metadata["choices"]) + "}"
            group.add_argument(*names, metavar=metavar, **kw)
        elif kind in (int, float):
            kw["type"] = number(kind, type(None) in kinds)
            group.add_argument(*names, metavar="N", **kw)
        else:
            group.add_argument(*names, metavar="PATH", **kw)


def given(args, cls, defaults: dict | None = None) -> dict:
    """The fields of `cls` the command line set, over `defaults` (field name ->
    value)."""
    out = {f.name: defaults[f.name] for f in fields(cls) if f.name in (defaults or {})}
    for f in fields(cls):
        dest = option(f)[1]
        if hasattr(args, dest):
            out[f.name] = getattr(args, dest)
    return out
