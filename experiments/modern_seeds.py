#!/usr/bin/env python3
"""Chapter 12's measurement (section 12.7) with several seeds a row: each of `VARIANTS`
and the decoder-only translator, at the 2017 model's parameter count, trained by
`measure` with `RECIPE` (chapter 9's warm-up, one epoch) on the chapter's 25,000 pairs,
once per seed; writes `records/modern-seeds.json`, which chapter 12 reads.

    python experiments/modern_seeds.py --seeds 5 --threads 2

About 10 minutes on two cores. Nothing else should use the cores meanwhile: the record
keeps the speeds too.
"""

import argparse
import sys
import time
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nmt_lib.base.cache import data_fingerprint  # noqa: E402
from nmt_lib.base.device import use_threads  # noqa: E402
from nmt_lib.data import NMTData  # noqa: E402
from nmt_lib.fast import greedy_decode_fast  # noqa: E402
from nmt_lib.lm_translator import decoder_only, prompt_greedy  # noqa: E402
from nmt_lib.modern_experiment import RECIPE, SIZES, d_ff_for, measure  # noqa: E402
from nmt_lib.modern_experiment import variants_at_size  # noqa: E402
from nmt_lib.run.records import command_line, write_record  # noqa: E402

PAIRS = 25_000  # the chapter's NMTData.fra_eng(max_pairs=25_000, min_freq=3)
DECODER_ONLY = "decoder-only (modern)"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seeds", type=int, default=5, help="seeds 1 .. N for every row"
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "records" / "modern-seeds.json"
    )
    parser.add_argument("--threads", type=int)
    args = parser.parse_args(argv)
    use_threads(args.threads)
    data = NMTData.fra_eng(max_pairs=PAIRS, min_freq=3)
    builds, target = variants_at_size(data, SIZES)
    build = partial(decoder_only, data, SIZES)
    builds[DECODER_ONLY] = partial(build, d_ff_for(build, target))
    rows, start = [], time.perf_counter()
    for name, build in builds.items():
        search = prompt_greedy if name == DECODER_ONLY else greedy_decode_fast
        for seed in range(1, args.seeds + 1):
            _, figures = measure(
                build, data, replace(RECIPE, seed=seed), search=search, device="cpu"
            )
            rounded = {k: round(v, 4) for k, v in figures.items()}
            rows.append({"model": name, "seed": seed, **rounded})
            print(
                f"{name}, seed {seed}: valid BLEU {figures['valid BLEU']:.2f},"
                f" perplexity {figures['valid perplexity']:.2f}"
                f" ({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
    write_record(
        args.out,
        {
            "kind": "seeds",
            "title": "Chapter 12's measurement, every row with several seeds",
            "command": command_line("experiments/modern_seeds.py", argv),
            "data": {"max_pairs": PAIRS, "fingerprint": data_fingerprint(data)},
            "sizes": SIZES,
            "recipe": asdict(RECIPE),
            "minutes": round((time.perf_counter() - start) / 60, 1),
            "rows": rows,
        },
    )
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
