"""Records: the figures a run measured, written as JSON by the run itself (`evaluate
--record`, `make bench`, `make soak`), stamped with the time, CPU and torch, so that the
README and the book render them (`tools/render_tables.py`), not anyone's typing.
"""

import json
import os
import platform
import shlex
import sys
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
    units = {"avx512_bf16": "AVX-512 BF16", "avx512f": "AVX-512", "avx2": "AVX2"}
    unit = next((name for flag, name in units.items() if flag in flags), None)
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


SCORES = "split beam alpha sentences references sacrebleu signature chrf".split()
SCORES += "chrf_signature token_bleu unknown copied sacrebleu_with_unknowns".split()


def evaluation_record(ckpt, scores, *, command: str, seconds: float) -> dict:
    """What `evaluate --record` writes: the scores and signatures of `scores` (an
    `Evaluation`), and the model, vocabularies, data and training they are of."""
    payload, progress = ckpt.payload, ckpt.payload.get("progress") or {}
    epochs = validations(progress.get("history") or {})
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


def command_line(script: str, argv=None) -> str:
    """How a script was run, for its record: `python SCRIPT ARGS`, shell-quoted."""
    return shlex.join(["python", script, *(sys.argv[1:] if argv is None else argv)])


def bleu_interval(counts_a, counts_b) -> tuple[float, float]:
    """The 95% interval of BLEU(a) - BLEU(b) over the sentences whose BLEU counts these
    are: chapter 4a's paired bootstrap, its defaults."""
    import numpy as np

    from nmt_lib.metrics import paired_bootstrap

    a, b = paired_bootstrap(counts_a, counts_b)
    low, high = np.percentile(a - b, [2.5, 97.5])
    return float(low), float(high)


def validations(history: dict) -> list[tuple]:
    """(epoch, update, valid loss) of each validated epoch end in a run's history."""
    ends = zip(*(history.get(k, []) for k in ("epoch", "epoch_step", "valid_loss")))
    return [end for end in ends if end[2] is not None]


def read_record(name: str) -> dict:
    """`records/NAME.json` of this checkout (a chapter quotes a full-scale run)."""
    path = RECORDS / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: the record comes with the course's repository"
        )
    return json.loads(path.read_text(encoding="utf-8"))
