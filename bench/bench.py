#!/usr/bin/env python3
"""How fast the course trains and decodes, against a d2l-style baseline and
torch.nn.Transformer (book/benchmarks.md).

    python bench/bench.py     # the full benchmark (about 10 minutes on 2 CPU cores)
    python bench/bench.py --rounds 2 --steps 2 --decode-sentences 40 --cpu-lines 200

Each comparison runs its contenders alternately, in this one process, on the same
batches, for several rounds; it reports the median of the per-round ratios, because on
these shared machines absolute speeds drift from minute to minute while a ratio measured
within one round holds. 2 CPU threads. Three sections, each in a module of its own:
bench/training.py (training speed and model FLOP utilisation), bench/decoding.py
(decoding speed and the peak memory of `translate`) and bench/translation.py (the
published model on one CPU core). Results: a table on stdout and
bench/results/latest.json, whose table tools/render_tables.py renders into the book.
"""

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.decoding import bench_decoding, decoding_rows  # noqa: E402
from bench.training import bench_training, training_rows  # noqa: E402
from bench.translation import bench_cpu_translation, translation_rows  # noqa: E402
from nmt_lib.run.records import write_record  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    number = lambda flag, default, text: parser.add_argument(
        flag, type=int, default=default, help=f"{text} ({default or 'all'})"
    )
    number("--rounds", 5, "training rounds")
    number("--steps", 16, "batches per contender per training round")
    number("--decode-sentences", 500, "held-out sentences to decode")
    number("--decode-rounds", 5, "decoding rounds")
    number("--cpu-lines", None, "Tatoeba test lines for the one-core translation")
    parser.add_argument(
        "--checkpoint",
        help="model for the decoding section (default: the course's published model,"
        " models/tatoeba-en-fr)",
    )
    parser.add_argument(
        "--bf16",
        action="store_true",
        help="add the bf16 contenders even where this CPU only emulates bf16 (slow;"
        " for checking the code path)",
    )
    parser.add_argument(
        "--out", default=str(ROOT / "bench" / "results" / "latest.json")
    )
    args = parser.parse_args(argv)
    if min(args.rounds, args.steps, args.decode_sentences, args.decode_rounds) < 1:
        parser.error(
            "--rounds, --steps, --decode-sentences and --decode-rounds must be positive"
        )
    torch.set_num_threads(2)
    report = lambda text: print(text, file=sys.stderr, flush=True)

    started = time.perf_counter()
    t = bench_training(args, report)
    d = bench_decoding(args, report)
    c = bench_cpu_translation(args, report)
    minutes, threads = (time.perf_counter() - started) / 60, torch.get_num_threads()
    run = (
        f"{minutes:.1f} min: {t['rounds']} rounds × {t['batches_per_round']} batches"
        f" per contender, {threads} threads; decoding with {d['model']}, torch"
        f" {torch.__version__}"
    )
    rows = [*training_rows(t), *decoding_rows(d), *translation_rows(c)]
    rows.append(["run", run, ""])
    command = argv if argv is not None else sys.argv[1:]
    result = {
        "training": t,
        "decoding": d,
        "cpu_translation": c,
        "threads": threads,
        "bench_seconds": minutes * 60,
        "command": " ".join(["python", "bench/bench.py", *command]),
    }
    result["tables"] = [{"columns": ["figure", "measured", "target"], "rows": rows}]
    out = write_record(args.out, result)  # stamped with the date, the CPU and torch
    for figure, measured, target in rows:
        print(f"{figure}: {measured}" + (f" (target {target})" if target else ""))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
