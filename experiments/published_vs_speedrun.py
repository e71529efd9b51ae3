#!/usr/bin/env python3
"""The speedrun's main-track records against the published model, on the public Tatoeba
test: the published model translates the test with beam 4 at its own length penalty, and
each record's score less its score comes with the paired bootstrap's 95% interval over
the test sentences (the speedrun table's). Writes records/speedrun-published.json, whose
table the speedrun page shows.

    # about 3 minutes on two cores
    python experiments/published_vs_speedrun.py --threads 2
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "speedrun")]

from nmt_lib.base.device import use_threads  # noqa: E402
from nmt_lib.run.inference import evaluate_public  # noqa: E402
from nmt_lib.run.published import load_published  # noqa: E402
from nmt_lib.run.records import RECORDS, command_line, cpu_name  # noqa: E402
from nmt_lib.run.records import read_record, write_record  # noqa: E402
from run import gain, read_records, sentence_counts, training  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    use_threads(args.threads)
    # the length penalty the published model is scored at
    alpha = read_record("tatoeba-test-beam4")["alpha"]
    scored = evaluate_public(load_published(), beam=4, alpha=alpha)
    published = {
        "beam4": {"sacrebleu": scored.sacrebleu},
        "counts_beam4": sentence_counts(scored.hypotheses, scored.reference_lines),
    }
    rows = [
        [r["name"], f"{r['beam4']['sacrebleu']:.2f}", gain(r, published), training(r)]
        for r in read_records("main")
    ]
    write_record(
        RECORDS / "speedrun-published.json",
        {
            "kind": "speedrun comparison",
            "command": command_line("experiments/published_vs_speedrun.py", argv),
            "caption": (
                f"the published model scores {scored.sacrebleu:.2f} with beam 4 (α"
                f" {alpha:g}) on the public Tatoeba test; each interval is the paired"
                f" bootstrap's over its {len(published['counts_beam4']):,} sentences;"
                f" by `python experiments/published_vs_speedrun.py` on {cpu_name()}"
            ),
            "tables": [
                {
                    "columns": [
                        "main-track record",
                        "test BLEU, beam 4",
                        "less the published model (95% interval)",
                        "training",
                    ],
                    "rows": rows,
                    "align": "lrrl",
                }
            ],
        },
    )


if __name__ == "__main__":
    main()
