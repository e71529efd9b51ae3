#!/usr/bin/env python3
"""Chapter 4b's comparison at a larger scale: the GRU encoder-decoder with and without
Bahdanau attention, trained on pairs drawn from the whole corpus (sentences up to 30
tokens, as the chapter's exercise 2 draws them) with a wider GRU and more epochs, scored
on the held-out test split overall and by English length, each difference with chapter
4a's paired-bootstrap interval. Writes `records/attention-at-scale.json`, which chapter
4b reads.

    python experiments/attention_at_scale.py train seq2seq --threads 1 &
    python experiments/attention_at_scale.py train bahdanau --threads 1 &
    wait
    python experiments/attention_at_scale.py report

The two trainings run side by side, one core each (about 35 minutes on two cores);
each leaves its test translations in runs/attention-at-scale/, which `report` scores.
"""

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nmt_lib.base.cache import data_fingerprint  # noqa: E402
from nmt_lib.base.device import use_threads  # noqa: E402
from nmt_lib.base.download import fra_eng_path  # noqa: E402
from nmt_lib.data import NMTData  # noqa: E402
from nmt_lib.text import preprocess, read_pairs  # noqa: E402

PAIRS, MAX_TOKENS = 100_000, 30  # pairs drawn (seed 0) from the cleaned corpus
SIZES = dict(embed_size=256, num_hiddens=256, num_layers=1, dropout=0.2)
RECIPE = dict(SIZES, epochs=5, lr=1e-3, batch_size=128, seed=1)
EDGES = (1, 6, 9, 12, 31)  # English lengths [lo, hi), 200 test sentences or more each
RUNS = ROOT / "runs" / "attention-at-scale"
NAMES = {"seq2seq": "GRU seq2seq", "bahdanau": "Bahdanau attention"}


def drawn_data() -> NMTData:
    """Exercise 2's data, larger: the whole corpus cleaned, pairs of at most MAX_TOKENS
    tokens a side, shuffled with seed 0; PAIRS of them, split by English sentence."""
    pairs = [(preprocess(s), preprocess(t)) for s, t in read_pairs(fra_eng_path())]
    short = [
        p for p in pairs if max(len(p[0].split()), len(p[1].split())) <= MAX_TOKENS
    ]
    random.Random(0).shuffle(short)
    return NMTData(short[:PAIRS], min_freq=3)


def train(kind: str) -> Path:
    """Train one model with RECIPE and keep its test translations and history."""
    import torch

    from nmt_lib.decoding import evaluate_bleu
    from nmt_lib.recipes import fit_on_splits
    from nmt_lib.seq2seq import make_rnn, xavier_init

    data = drawn_data()
    print(data, flush=True)
    torch.manual_seed(RECIPE["seed"])
    model = make_rnn(kind, len(data.src_vocab), len(data.tgt_vocab), **SIZES)
    info = fit_on_splits(
        xavier_init(model),
        data,
        epochs=RECIPE["epochs"],
        batch_size=RECIPE["batch_size"],
        lr=RECIPE["lr"],
        title=NAMES[kind],
    )
    result = evaluate_bleu(
        model, data.splits.test, data.src_vocab, data.tgt_vocab, max_len=60
    )
    print(f"{kind}: test BLEU {result.bleu:.2f}", flush=True)
    RUNS.mkdir(parents=True, exist_ok=True)
    out = RUNS / f"{kind}.json"
    run = {**info, "data": repr(data), "fingerprint": data_fingerprint(data)}
    out.write_text(
        json.dumps({**run, **result._asdict()}, ensure_ascii=False), encoding="utf-8"
    )
    return out


def report(command: str) -> Path:
    """Score both runs overall and by English length, and write the record."""
    from nmt_lib.decoding import BleuResult
    from nmt_lib.metrics import corpus_bleu
    from nmt_lib.run.records import RECORDS, bleu_interval, write_record

    runs = {
        kind: json.loads((RUNS / f"{kind}.json").read_text(encoding="utf-8"))
        for kind in NAMES
    }
    results = {
        kind: BleuResult(*(r[f] for f in BleuResult._fields))
        for kind, r in runs.items()
    }

    def bucket(result, lo, hi):
        keep = [i for i, s in enumerate(result.sources) if lo <= len(s.split()) < hi]
        hyps, refs = (
            [getattr(result, f)[i] for i in keep] for f in ("hypotheses", "references")
        )
        bleu = corpus_bleu(
            [h.split() for h in hyps], [[r.split() for r in rs] for rs in refs]
        )
        return BleuResult(bleu, [result.sources[i] for i in keep], hyps, refs)

    rows = []
    for lo, hi in ((1, 1000), *zip(EDGES[:-1], EDGES[1:])):
        plain, attention = (bucket(results[k], lo, hi) for k in ("seq2seq", "bahdanau"))
        gain = attention.bleu - plain.bleu
        low, high = bleu_interval(attention.counts(), plain.counts())
        rows.append(
            [
                "all" if hi == 1000 else f"{lo}-{hi - 1}",
                f"{len(plain.sources):,}",
                round(plain.bleu, 1),
                round(attention.bleu, 1),
                f"{gain:+.1f} ({low:+.1f} to {high:+.1f})",
            ]
        )
    columns = [
        "English tokens",
        "test sentences",
        "GRU seq2seq BLEU",
        "Bahdanau BLEU",
        "Bahdanau - seq2seq (95% interval)",
    ]
    training = [
        [
            NAMES[k],
            f"{r['parameters']:,}",
            r["history"]["epoch"][-1],
            round(r["history"]["valid_loss"][-1], 3),
            round(r["seconds"] / 60, 1),
        ]
        for k, r in runs.items()
    ]
    return write_record(
        RECORDS / "attention-at-scale.json",
        {
            "kind": "comparison",
            "title": "Chapter 4b's comparison at a larger scale",
            "command": command,
            "data": runs["seq2seq"]["data"],
            "recipe": RECIPE,
            "caption": (
                "corpus BLEU on the course's tokens against all references, greedy;"
                " intervals: paired bootstrap over the test sentences (one seed a"
                " model)"
            ),
            "tables": [
                {"columns": columns, "rows": rows, "align": "lrrrr"},
                {
                    "columns": [
                        "model",
                        "parameters",
                        "epochs",
                        "valid loss",
                        "minutes",
                    ],
                    "rows": training,
                    "align": "lrrrr",
                },
            ],
        },
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=["train", "report"])
    parser.add_argument("kind", nargs="?", choices=list(NAMES))
    parser.add_argument("--threads", type=int)
    args = parser.parse_args(argv)
    use_threads(args.threads)
    if args.step == "train":
        if args.kind is None:
            parser.error("train: name the model, seq2seq or bahdanau")
        print(f"written {train(args.kind)}")
    else:
        script = "python experiments/attention_at_scale.py"
        steps = [f"{script} train {k} --threads 1" for k in NAMES]
        print(f"written {report(f'{steps[0]} & {steps[1]}; wait; {script} report')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
