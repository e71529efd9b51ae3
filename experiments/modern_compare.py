#!/usr/bin/env python3
"""The modern recipe at full scale beside the published one (issue 36): each candidate
checkpoint's size, switches, updates, training time and speed, and its greedy BLEU and
chrF on the run's validation split (sacreBLEU against all of a sentence's references)
and on the public Tatoeba test; writes `records/modern-tatoeba.json`, which the README's
and the Results page's tables are rendered from.

    python experiments/modern_compare.py --threads 2 \\
        --candidate \\
        "2017 blocks (the published recipe), epoch 6=runs/tatoeba.epoch6.pt" \\
        --candidate "modern (RMSNorm, SwiGLU, RoPE, GQA), epoch 6=runs/modern.epoch6.pt"

Every candidate must come from runs of the same data settings (the same split and
vocabulary), so the rows differ only in the model.
"""

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nmt_lib.modern import ModernParts  # noqa: E402
from nmt_lib.run.checkpoint import load_checkpoint  # noqa: E402
from nmt_lib.run.corpus import ParallelCorpus, split_settings  # noqa: E402
from nmt_lib.base.device import use_threads  # noqa: E402
from nmt_lib.run.inference import evaluate_checkpoint, evaluate_public  # noqa: E402
from nmt_lib.run.records import command_line, write_record  # noqa: E402


def switches(model) -> str:
    """The model's choices where 2017 and today differ, in words (its config, and
    chapter 12's parts)."""
    cfg = model.cfg
    parts = getattr(model, "parts", ModernParts())
    kv = parts.kv_heads or cfg.n_heads
    return ", ".join(
        [
            "pre-norm" if cfg.norm_first else "post-norm",
            "RMSNorm" if parts.rms else "LayerNorm",
            f"SwiGLU d_ff {cfg.d_ff}" if parts.swiglu else f"ReLU d_ff {cfg.d_ff}",
            "RoPE" if parts.rope else "sinusoidal positions",
            (
                f"{kv} key/value heads for {cfg.n_heads}"
                if kv != cfg.n_heads
                else f"{cfg.n_heads} heads"
            ),
        ]
    )


def row(label: str, ckpt, corpus) -> dict:
    """One candidate's figures: training from its checkpoint, scores measured here."""
    progress = ckpt.payload["progress"]
    history = progress["history"]
    start = time.perf_counter()
    valid = evaluate_checkpoint(ckpt, split="valid", corpus=corpus)
    test = evaluate_public(ckpt)
    tokens = sum(history.get("tokens", []))
    return {
        "candidate": label,
        "switches": switches(ckpt.model),
        "parameters": ckpt.parameters,
        "updates": ckpt.step,
        "epochs": len(history["epoch"]),
        "training_minutes": round(progress["seconds"] / 60, 1),
        "target_tokens_per_second": (
            round(tokens / progress["seconds"]) if tokens else None
        ),
        "valid_perplexity": round(math.exp(history["valid_loss"][-1]), 3),
        "valid_bleu": round(valid.sacrebleu, 2),
        "valid_chrf": round(valid.chrf, 2),
        "test_bleu": round(test.sacrebleu, 2),
        "test_chrf": round(test.chrf, 2),
        "valid_signature": valid.signature,
        "test_signature": test.signature,
        "scoring_seconds": round(time.perf_counter() - start, 1),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--candidate",
        action="append",
        required=True,
        metavar="LABEL=CHECKPOINT",
        help="a checkpoint to score, with the name its row gets (give two or more)",
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "records" / "modern-tatoeba.json"
    )
    parser.add_argument("--threads", type=int)
    args = parser.parse_args(argv)
    use_threads(args.threads)
    candidates = []
    for given in args.candidate:
        label, sep, path = given.partition("=")
        if not sep or not label or not path:
            parser.error(f"--candidate takes LABEL=CHECKPOINT, got {given!r}")
        candidates.append((label, load_checkpoint(path, device="cpu")))
    settings = [
        json.dumps(split_settings(c.payload["data"]), sort_keys=True)
        for _, c in candidates
    ]
    if len(set(settings)) > 1:
        parser.error(
            "the candidates were trained on different data settings, so their scores"
            " are not comparable"
        )
    corpus = ParallelCorpus.from_settings(
        candidates[0][1].payload["data"],
        vocabularies=(candidates[0][1].src_vocab, candidates[0][1].tgt_vocab),
    )
    rows = []
    for label, ckpt in candidates:
        rows.append(row(label, ckpt, corpus))
        r = rows[-1]
        print(
            f"{label}: valid BLEU {r['valid_bleu']:.2f}, test BLEU {r['test_bleu']:.2f}"
            f" ({r['scoring_seconds']:.0f} s)",
            flush=True,
        )
    write_record(
        args.out,
        {
            "kind": "modern comparison",
            "title": "The 2017 blocks and today's, at full scale and equal size",
            "command": command_line("experiments/modern_compare.py", argv),
            "method": (
                "greedy decoding; validation: the run's held-out split (case kept, the"
                " Tatoeba test's sentences left out), sacreBLEU against all of a"
                " sentence's references; test: the public Tatoeba test (v2021-08-07),"
                " one reference per line"
            ),
            "rows": rows,
        },
    )
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
