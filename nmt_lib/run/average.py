"""Checkpoint averaging: one model whose weights are the mean of several checkpoints of one run (the
paper averages the last 5 or 20). `train --keep-last N` keeps the last N epoch ends to average.

    python -m nmt_lib average --out runs/avg.pt runs/big.epoch26.pt runs/big.epoch27.pt runs/big.pt
"""
import os
import re
import shutil
from pathlib import Path

import torch

from nmt_lib.run.cache import atomic_save
from nmt_lib.run.checkpoint import CheckpointError, load_checkpoint

SAME = ("config", "src_vocab", "tgt_vocab", "tokenizer", "preprocess")     # what must agree between them


def epoch_checkpoint(checkpoint, epoch: int) -> Path:
    """Where `keep_last` keeps the checkpoint of an epoch's end: OUT.epochE.pt beside OUT.pt."""
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(f"{checkpoint.stem}.epoch{epoch}{checkpoint.suffix}")


def keep_epoch(checkpoint, epoch: int, keep: int) -> Path:
    """Keep the checkpoint just written at the end of `epoch` beside it, and only the last `keep` of
    those. A hard link costs no disk until the next save replaces the file (`atomic_save` renames a new
    file over it, so the link keeps this epoch's); a copy where links are not possible."""
    checkpoint, kept = Path(checkpoint), epoch_checkpoint(checkpoint, epoch)
    kept.unlink(missing_ok=True)
    try:
        os.link(checkpoint, kept)
    except OSError:
        shutil.copyfile(checkpoint, kept)
    pattern = re.compile(rf"{re.escape(checkpoint.stem)}\.epoch(\d+){re.escape(checkpoint.suffix)}")
    older = [p for p in checkpoint.parent.iterdir() if (m := pattern.fullmatch(p.name)) and int(m[1]) <= epoch - keep]
    for path in older:
        path.unlink(missing_ok=True)
    return kept


def add_parser(sub):
    p = sub.add_parser("average", help="average the weights of several checkpoints of one run",
                       description="Write one checkpoint whose weights are the mean of the given checkpoints' "
                       "(of one run: the same model, vocabularies and data). It translates and evaluates like any "
                       "checkpoint, and keeps the training history of the latest one, but cannot be resumed.")
    p.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT", help="checkpoints written by train")
    p.add_argument("--out", required=True, help="checkpoint file to write")
    return p


def average_checkpoints(paths, out) -> Path:
    """Write to `out` the mean of the checkpoints at `paths`: `CheckpointError` if one is unusable or they
    are not of one run. The result keeps the latest checkpoint's (most updates) settings and history,
    lists the updates it averages under "averaged", and holds no optimizer state."""
    paths = [Path(p) for p in paths]
    if len(set(map(Path.resolve, paths))) < len(paths):
        raise ValueError("a checkpoint is named twice: each would count twice in the mean")
    if Path(out).resolve() in map(Path.resolve, paths):
        raise ValueError(f"--out {out} is one of the checkpoints to average: write the mean to another file")
    loaded = [load_checkpoint(p, device="cpu") for p in paths]
    first = loaded[0].payload
    data = lambda payload: {k: v for k, v in payload["data"].items() if k != "path"}
    for path, ckpt in zip(paths[1:], loaded[1:]):
        differ = [k for k in SAME if ckpt.payload.get(k) != first.get(k)]
        differ += ["data"] if data(ckpt.payload) != data(first) else []
        if differ:
            raise CheckpointError(f"{path} is not of the same run as {paths[0]}: its {', '.join(differ)} differ")
    latest = max(loaded, key=lambda c: c.step)
    state = {name: torch.stack([c.payload["state_dict"][name].float() for c in loaded]).mean(0)
             for name in first["state_dict"]}
    payload = {**latest.payload, "state_dict": state, "optimizer": None, "schedule": None, "scaler": None,
               "averaged": sorted(c.step for c in loaded)}
    return atomic_save(payload, out)


def average_command(args, parser) -> int:
    out = average_checkpoints(args.checkpoints, args.out)
    print(f"averaged {len(args.checkpoints)} checkpoints into {out}")
    return 0
