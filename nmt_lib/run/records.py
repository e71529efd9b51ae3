"""Records: the figures a run measured, written as JSON by the run itself, so that the
README and the book render them (`tools/render_tables.py`) instead of anyone typing
them.

`evaluate --record FILE` writes one for a trained model, `make bench` writes
`bench/results/latest.json` and `make soak` writes `records/soak.json`. Each record says
when, on which CPU and with which torch it was made.
"""

import json
import os
import platform
from datetime import datetime, timezone
from pathlib import Path

from nmt_lib.base.cache import atomic_save
from nmt_lib.base.device import cpu_info

# the repository's records/ folder
RECORDS = Path(__file__).resolve().parents[2] / "records"


def cpu_name() -> str:
    """This CPU's model and its widest vector unit, e.g. 'AMD EPYC 9R14 (AVX-512 BF16),
    2 cores'."""
    model, flags = cpu_info()
    if model is None:
        return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    unit = (
        "AVX-512 BF16"
        if "avx512_bf16" in flags
        else "AVX-512"
        if "avx512f" in flags
        else "AVX2"
        if "avx2" in flags
        else None
    )
    return f"{model}{f' ({unit})' if unit else ''}, {os.cpu_count()} cores"


def machine() -> dict:
    """Where a record was made: the CPU, and the Python and torch that ran."""
    import torch

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return {
        "cpu": cpu_name(),
        "gpu": gpu,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def write_record(path, record: dict) -> Path:
    """Write `record`, stamped with the time and the machine, as JSON to `path`,
    atomically."""
    stamped = {
        **record,
        "recorded": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
    }
    text = json.dumps(stamped, indent=1, ensure_ascii=False) + "\n"
    return atomic_save(
        text, path, write=lambda t, file: Path(file).write_text(t, encoding="utf-8")
    )


SCORES = (
    "split",
    "beam",
    "alpha",
    "sentences",
    "references",
    "sacrebleu",
    "signature",
    "chrf",
    "chrf_signature",
    "token_bleu",
    "unknown",
    "copied",
    "sacrebleu_with_unknowns",
)


def evaluation_record(ckpt, scores, *, command: str, seconds: float) -> dict:
    """What `evaluate --record` writes: the scores and their signatures (of `scores`, an
    `inference.Evaluation`), and what they are the scores of (the model's settings and
    size, its vocabularies, data and training as the checkpoint holds them).
    """
    payload, progress = ckpt.payload, ckpt.payload.get("progress") or {}
    history = progress.get("history") or {}
    epochs = [
        (e, s, v)
        for e, s, v in zip(
            history.get("epoch", []),
            history.get("epoch_step", []),
            history.get("valid_loss", []),
        )
        if v is not None
    ]
    # the path is this machine's
    data = {k: v for k, v in payload["data"].items() if k != "path"}
    return {
        "kind": "evaluation",
        "command": command,
        "evaluation_seconds": round(seconds, 1),
        **{k: getattr(scores, k) for k in SCORES},
        "model": {
            "config": payload["config"],
            "parts": payload.get("parts"),
            "parameters": ckpt.parameters,
            "int8": ckpt.int8,
            "source_vocabulary": len(ckpt.src_vocab),
            "target_vocabulary": len(ckpt.tgt_vocab),
        },
        "data": {**data, "file": Path(payload["data"].get("path") or "").name},
        "training": {
            "settings": payload.get("train"),
            "updates": progress.get("step"),
            "epoch": progress.get("epoch"),
            "seconds": progress.get("seconds"),
            "valid_loss": [{"epoch": e, "update": s, "loss": v} for e, s, v in epochs],
            "sessions": progress.get("sessions"),
            "averaged": payload.get("averaged"),
        },
    }


def read_record(name: str) -> dict:
    """The record `records/NAME.json` of this checkout (a chapter quotes what a
    full-scale run measured)."""
    path = RECORDS / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: the record comes with the course's repository"
        )
    return json.loads(path.read_text(encoding="utf-8"))
