"""Checkpoint averaging: one model whose weights are the mean of several checkpoints of
one run (the paper averages the last 5 or 20). `train --keep-last N` keeps the last N
epoch ends to average.

    python -m nmt_lib average --out runs/avg.pt \\
        runs/big.epoch25.pt runs/big.epoch26.pt runs/big.epoch27.pt
"""

import os
import re
import shutil
from pathlib import Path

from nmt_lib.base.cache import atomic_save
from nmt_lib.run.checkpoint import CheckpointError, load_checkpoint, read_payload
from nmt_lib.run.corpus import split_settings

SAME = ("config", "src_vocab", "tgt_vocab", "tokenizer", "preprocess")  # must agree
RUN_SETTINGS = ("seed", "lr_factor", "warmup", "label_smoothing", "max_tokens")
RUN_SETTINGS += ("tokens_per_update", "clip")


def epoch_checkpoint(checkpoint, epoch: int) -> Path:
    """Where `keep_last` keeps an epoch end: OUT.epochE.pt beside OUT.pt."""
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(f"{checkpoint.stem}.epoch{epoch}{checkpoint.suffix}")


def kept_epochs(checkpoint) -> dict[int, Path]:
    """The epoch ends kept beside `checkpoint` (OUT.epochE.pt), by epoch."""
    checkpoint = Path(checkpoint)
    pattern = re.compile(
        rf"{re.escape(checkpoint.stem)}\.epoch(\d+){re.escape(checkpoint.suffix)}"
    )
    if not checkpoint.parent.is_dir():
        return {}
    return {
        int(m[1]): p
        for p in checkpoint.parent.iterdir()
        if (m := pattern.fullmatch(p.name))
    }


def keep_epoch(checkpoint, epoch: int, keep: int) -> Path:
    """Keep the checkpoint just written at the end of `epoch` beside it, and the last
    `keep` of those only: a hard link (free until `atomic_save` renames the next save
    over the file), or a copy."""
    checkpoint, kept = Path(checkpoint), epoch_checkpoint(checkpoint, epoch)
    kept.unlink(missing_ok=True)
    try:
        os.link(checkpoint, kept)
    except OSError:
        shutil.copyfile(checkpoint, kept)
    for e, path in kept_epochs(checkpoint).items():
        if e <= epoch - keep:
            path.unlink(missing_ok=True)
    return kept


def add_parser(sub):
    p = sub.add_parser(
        "average",
        help="average the weights of several checkpoints of one run",
        description="Write one checkpoint whose weights are the mean of the given"
        " checkpoints' (of one run: the same model, vocabularies and data). It"
        " translates and evaluates like any checkpoint, and keeps the training history"
        " of the latest one, but cannot be resumed.",
    )
    p.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT", help="from train")
    p.add_argument("--out", required=True, help="checkpoint file to write")
    return p


def run_of(payload: dict) -> dict:
    """What checkpoints of one run share: model, vocabularies, preprocessing, data
    split, and the settings that shape training."""
    train = {k: v for k, v in (payload.get("train") or {}).items() if k in RUN_SETTINGS}
    return {
        **{k: payload.get(k) for k in SAME},
        "data": split_settings(payload["data"]),
        "train": train,
    }


def average_checkpoints(paths, out) -> Path:
    """Write to `out` the mean of the checkpoints at `paths`, one in memory at a time
    (`CheckpointError` if they are not of one run; `ValueError` for a repeated update,
    or `out` a run's checkpoint). It keeps the latest's settings and history, lists the
    updates under "averaged", and holds no optimizer state."""
    paths, out = [Path(p) for p in paths], Path(out)
    for i, path in enumerate(paths):
        for other in paths[:i]:
            if path.exists() and other.exists() and os.path.samefile(path, other):
                raise ValueError(
                    f"{path} is named twice (or is a link to {other}): it would count"
                    " twice"
                )
        if out.exists() and path.exists() and os.path.samefile(path, out):
            raise ValueError(
                f"--out {out} is one of the checkpoints to average: write the mean to"
                " another file"
            )
    refuse_a_runs_checkpoint(out)
    total, first, latest, steps = None, None, None, {}
    for path in paths:
        ckpt = load_checkpoint(path, device="cpu")
        if ckpt.step in steps:
            raise ValueError(
                f"{path} holds the same update ({ckpt.step:,}) as {steps[ckpt.step]}:"
                " it would count twice"
            )
        # the latest so far: its settings and history
        if not steps or ckpt.step > max(steps):
            latest = {k: v for k, v in ckpt.payload.items() if k != "state_dict"}
        steps[ckpt.step] = path
        if first is None:
            first = run_of(ckpt.payload)
        differ = [k for k, v in run_of(ckpt.payload).items() if v != first[k]]
        if differ:
            raise CheckpointError(
                f"{path} is not of the same run as {paths[0]}: its {', '.join(differ)}"
                " differ"
            )
        state = {name: t.float() for name, t in ckpt.payload["state_dict"].items()}
        total = (
            state
            if total is None
            else {name: total[name] + t for name, t in state.items()}
        )
        del ckpt
    return atomic_save(
        weights_only(
            latest, {name: t / len(paths) for name, t in total.items()}, sorted(steps)
        ),
        out,
    )


def refuse_a_runs_checkpoint(out: Path):
    if out.exists() and (read_payload(out, "cpu") or {}).get("optimizer") is not None:
        raise ValueError(
            f"--out {out} is a run's checkpoint, which it could no longer resume from:"
            " write the averaged weights to another file"
        )


def weights_only(payload: dict, state_dict: dict, averaged) -> dict:
    """A checkpoint of averaged weights: `payload`'s model, settings and history, no
    training state, and "averaged": what the weights average."""
    kept = ("format", "config", "parts", "src_vocab", "tgt_vocab", "tokenizer", "data")
    return {
        **{k: payload[k] for k in (*kept, "train", "progress") if k in payload},
        "state_dict": state_dict,
        "optimizer": None,
        "schedule": None,
        "scaler": None,
        "averaged": averaged,
    }


def average_command(args, parser) -> int:
    out = average_checkpoints(args.checkpoints, args.out)
    print(f"averaged {len(args.checkpoints)} checkpoints into {out}")
    return 0
