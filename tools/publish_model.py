#!/usr/bin/env python3
"""Publish a trained checkpoint as the course's model: `models/tatoeba-en-fr/` with its
weights (safetensors, half precision), settings, the tables of its model card (rendered
from the checkpoint and its evaluation records between the card's <!--
card-NAME:start/end --> markers; the card's prose is written by hand), and the
translations of a few fixed sentences, which `tests/test_published.py` compares the
model with from then on.

    python tools/publish_model.py runs/tatoeba-avg.pt \\
        records/tatoeba-test-greedy.json \\
        records/tatoeba-test-beam4.json

The records are what `python -m nmt_lib evaluate --record` wrote for this checkpoint.
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nmt_lib.run.checkpoint import load_checkpoint  # noqa: E402
from nmt_lib.run.inference import search_name, translate_lines  # noqa: E402
from nmt_lib.run.published import MODELS, PUBLISHED, export_model  # noqa: E402
from nmt_lib.run.published import load_published  # noqa: E402
from tools.render_tables import figure, rendered, table  # noqa: E402

LIMIT_MB = 25  # the most the course ships in models/
EXAMPLES = [
    "I am cold.",
    "I don't know what to do.",
    "Where is the station?",
    "Tom has lived in Boston for three years.",
    "She asked him to help her with her homework.",
    "Could you recommend a good restaurant near here?",
    "The children were playing in the garden when it started to rain.",
]


def card_tables(ckpt, records: list[dict]) -> dict:
    """The model card's tables, from the checkpoint and its evaluation records (the
    card's prose is written)."""
    payload, progress = ckpt.payload, ckpt.payload.get("progress") or {}
    data = dict(payload["data"])
    excluded = data.pop("excluded", None) or {}
    rows = lambda d: [[k, figure(v)] for k, v in d.items()]
    training = rows(payload["train"]) + [
        ["updates trained", f"{ckpt.step:,}"],
        ["epochs trained", progress.get("epoch", 1) - 1],
    ]
    for i, s in enumerate(progress.get("sessions") or [], 1):
        updates = f"updates {s['from_update']:,} to {s['to_update']:,}"
        where = f"{s['seconds'] / 60:.1f} min on {s['machine']}"
        training.append([f"session {i}", f"{updates}: {where}"])
    averaged = payload.get("averaged")
    if isinstance(averaged, dict):
        ema = f"the moving average of the weights, decay {averaged['ema']}"
        training.append(["averaged", ema])
    elif averaged:
        updates = ", ".join(f"{u:,}" for u in averaged)
        training.append(["averaged: the mean of the epoch ends at updates", updates])
    scores = [
        [
            r["split"],
            figure(r["sentences"]),
            search_name(r["beam"], r["alpha"]),
            f"{r['sacrebleu']:.1f}",
            f"{r['chrf']:.1f}",
            f"`{r['signature']}`",
            f"{r['recorded'][:10]}, {r['machine']['cpu']}",
        ]
        for r in records
    ]
    return {
        "card-model": table(
            ["setting", "value"],
            rows(payload["config"]) + [["parameters", f"{ckpt.parameters:,}"]],
        ),
        "card-data": table(
            ["setting", "value"],
            rows(data) + [[f"left out: {k}", figure(v)] for k, v in excluded.items()],
        ),
        "card-training": table(["setting", "value"], training),
        "card-scores": table(
            ["test set", "sentences", "search", "BLEU", "chrF", "BLEU signature"]
            + ["recorded"],
            scores,
            "lrlrr",
        ),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument(
        "records", nargs="+", help="evaluate --record files of this checkpoint"
    )
    parser.add_argument("--out", default=str(MODELS / PUBLISHED))
    args = parser.parse_args(argv)
    ckpt = load_checkpoint(args.checkpoint, device="cpu")
    records = [json.loads(Path(p).read_text(encoding="utf-8")) for p in args.records]
    wrong = [
        p
        for p, r in zip(args.records, records)
        if r["model"]["parameters"] != ckpt.parameters
        or r["training"]["updates"] != ckpt.step
        or r["training"].get("averaged") != ckpt.payload.get("averaged")
    ]
    if wrong:
        parser.error(
            f"{', '.join(wrong)} did not score this checkpoint (other parameters,"
            " updates or average)"
        )
    card_path = Path(args.out) / "README.md"
    card = f"# {Path(args.out).name}\n"
    card = card_path.read_text(encoding="utf-8") if card_path.exists() else card
    for marker, content in card_tables(ckpt, records).items():
        card = rendered(card, marker, content, str(card_path))
    folder = export_model(ckpt, args.out, card=card)
    pub = load_published(folder, device="cpu")
    examples = {
        "search": "greedy",
        "sentences": EXAMPLES,
        "translations": translate_lines(pub, EXAMPLES),
    }
    (folder / "examples.json").write_text(
        json.dumps(examples, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    size = sum(p.stat().st_size for p in folder.iterdir()) / 2**20
    print(
        f"published {folder}: {size:.1f} MB"
        + (f", over the {LIMIT_MB} MB the course ships" if size > LIMIT_MB else "")
    )
    for s, t in zip(EXAMPLES, examples["translations"]):
        print(f"  {s}  ->  {t}")
    return 1 if size > LIMIT_MB else 0


if __name__ == "__main__":
    sys.exit(main())
