#!/usr/bin/env python3
"""The published model's recipe, chosen on the validation split (issue 35): scores each
candidate on the run's validation sentences; writes `records/recipe-tatoeba.json`.

    python experiments/recipe_search.py --baseline runs/tatoeba-d192.pt \\
        --run runs/tatoeba.pt

Candidates, in order: the earlier recipe (`--baseline`), any `--extra` ones, and the
larger model after the same training time; the larger model after more of its time; the
mean of its last 3, 5 and 8 epoch-end checkpoints (`train --keep-last`); then beam 4
with length penalties 0.6, 0.8, 1.0 and 1.2 on the best of those. Averaged checkpoints
are written beside the run (`OUT.avgN.pt`).
"""

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nmt_lib.run.average import average_checkpoints, epoch_checkpoint  # noqa: E402
from nmt_lib.run.average import kept_epochs  # noqa: E402
from nmt_lib.run.checkpoint import load_checkpoint, read_payload  # noqa: E402
from nmt_lib.run.corpus import ParallelCorpus, split_settings  # noqa: E402
from nmt_lib.base.device import use_threads  # noqa: E402
from nmt_lib.run.inference import evaluate_checkpoint  # noqa: E402
from nmt_lib.run.records import command_line, write_record  # noqa: E402
from nmt_lib.run.testsets import read_tatoeba_test  # noqa: E402

AVERAGES = (3, 5, 8)
ALPHAS = (0.6, 0.8, 1.0, 1.2)


def describe(ckpt) -> str:
    cfg = ckpt.model.cfg
    return (
        f"d_model {cfg.d_model}, {cfg.n_layers} + {cfg.n_layers} layers, d_ff"
        f" {cfg.d_ff}, {len(ckpt.tgt_vocab):,} BPE pieces ({ckpt.parameters / 1e6:.1f}"
        " M parameters)"
    )


def minutes(ckpt) -> float:
    return (ckpt.payload.get("progress") or {}).get("seconds", 0.0) / 60


def limits(train_pairs, test_pairs) -> dict:
    """What the public test asks that the training split cannot teach: sentences with a
    word no training sentence holds, each side, and English sentences listed more than
    once (one translation can match only one of their references)."""
    words = lambda text: set(re.findall(r"\w+", text.lower()))
    english = set().union(*(words(s) for s, _ in train_pairs))
    french = set().union(*(words(t) for _, t in train_pairs))
    counts = Counter(s for s, _ in test_pairs)
    return {
        "test_pairs": len(test_pairs),
        "training_pairs": len(train_pairs),
        "unseen_english_word": sum(bool(words(s) - english) for s, _ in test_pairs),
        "unseen_french_word": sum(bool(words(t) - french) for _, t in test_pairs),
        "repeated_english": sum(n for n in counts.values() if n > 1),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--baseline", type=Path, required=True, help="the earlier recipe's checkpoint"
    )
    parser.add_argument(
        "--run", type=Path, required=True, help="the larger model's run (its --out)"
    )
    parser.add_argument(
        "--extra",
        action="append",
        default=[],
        metavar="LABEL=CHECKPOINT",
        help="another candidate of the same data, scored greedily after the earlier"
        " recipe",
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "records" / "recipe-tatoeba.json"
    )
    parser.add_argument(
        "--limit", type=int, help="only the first N validation sentences (a quick look)"
    )
    parser.add_argument("--threads", type=int)
    args = parser.parse_args(argv)
    use_threads(args.threads)
    rows, corpora = [], {}

    def corpus_for(ckpt):
        """One corpus per data settings, built once."""
        key = json.dumps(split_settings(ckpt.payload["data"]), sort_keys=True)
        if key not in corpora:
            corpora[key] = ParallelCorpus.from_settings(
                ckpt.payload["data"], vocabularies=(ckpt.src_vocab, ckpt.tgt_vocab)
            )
        return corpora[key]

    def score(name: str, ckpt, beam: int = 1, alpha: float = 1.0, note="") -> dict:
        start = time.perf_counter()
        r = evaluate_checkpoint(
            ckpt,
            split="valid",
            beam=beam,
            alpha=alpha,
            limit=args.limit,
            corpus=corpus_for(ckpt),
        )
        row = {
            "candidate": name,
            "model": describe(ckpt),
            "updates": ckpt.step,
            "training_minutes": round(minutes(ckpt), 1),
            "search": (
                "greedy" if beam == 1 else f"beam {beam}, length penalty {alpha:g}"
            ),
            "valid_bleu": round(r.sacrebleu, 2),
            "valid_chrf": round(r.chrf, 2),
            "seconds": round(time.perf_counter() - start, 1),
            "note": note,
        }
        rows.append(row)
        print(
            f"{name:55} {row['search']:28} BLEU {row['valid_bleu']:6.2f}  chrF"
            f" {row['valid_chrf']:6.2f}  ({row['seconds']:.0f} s)",
            flush=True,
        )
        return {
            **row,
            "signature": r.signature,
            "sentences": r.sentences,
            "references": r.references,
        }

    baseline = load_checkpoint(args.baseline, device="cpu")
    first = score("earlier recipe", baseline)
    for extra in args.extra:
        label, _, path = extra.partition("=")
        score(label, load_checkpoint(path, device="cpu"))
    kept = kept_epochs(args.run)
    if not kept:
        parser.error(
            f"no epoch-end checkpoints beside {args.run} (train with --keep-last)"
        )
    load = lambda e: load_checkpoint(kept[e], device="cpu")
    spent = {
        e: read_payload(kept[e], "cpu")["progress"]["seconds"] / 60
        for e in sorted(kept)
    }  # no model built
    within = [e for e, m in spent.items() if m <= minutes(baseline) + 1]
    if within:
        score(
            f"larger model, epoch {max(within)}",
            load(max(within)),
            note="the earlier recipe's training time",
        )
    last = max(kept)
    for e in sorted(
        ({last // 2, (3 * last) // 4} & set(kept)) - {max(within, default=None), last}
    ):
        score(f"larger model, epoch {e}", load(e))
    best_ckpt = load(last)
    best = score(
        f"larger model, epoch {last}", best_ckpt, note="the last epoch end kept"
    )
    for n in AVERAGES:
        if n > len(kept):
            continue
        epochs = sorted(kept)[-n:]
        path = average_checkpoints(
            [epoch_checkpoint(args.run, e) for e in epochs],
            args.run.with_name(f"{args.run.stem}.avg{n}{args.run.suffix}"),
        )
        ckpt = load_checkpoint(path, device="cpu")
        row = score(f"mean of the last {n} epoch ends ({epochs[0]}-{epochs[-1]})", ckpt)
        if row["valid_bleu"] > best["valid_bleu"]:
            best, best_ckpt = row, ckpt
    beams = [score(f"{best['candidate']}", best_ckpt, beam=4, alpha=a) for a in ALPHAS]
    chosen = max([best, *beams], key=lambda r: r["valid_bleu"])
    write_record(
        args.out,
        {
            "kind": "recipe search",
            "title": "Choosing the published recipe on the validation split",
            "command": command_line("experiments/recipe_search.py", argv),
            "method": (
                "every candidate translates the distinct English sentences of the run's"
                " validation split (case kept, the Tatoeba test's sentences left out)"
                " and is scored with sacreBLEU against all their references"
            ),
            "signature": first["signature"],
            "sentences": first["sentences"],
            "references": first["references"],
            "rows": rows,
            "chosen": {"candidate": chosen["candidate"], "search": chosen["search"]},
            "limits": limits(corpus_for(best_ckpt).splits.train, read_tatoeba_test()),
        },
    )
    print(f"chosen: {chosen['candidate']}, {chosen['search']}; written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
