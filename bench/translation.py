"""Translation on one CPU core (book/benchmarks.md): the published model translates
the public Tatoeba test greedily in batches of 32, in source pieces (the model's
subwords) per second, three ways: batches in input order, sorted by length within the
blocks of lines `translate` reads at once, and sorted with int8 linear layers
(`translate --int8`). Each with its sacreBLEU; int8's difference from fp32 with chapter
4a's paired-bootstrap interval.
"""

import time

import sacrebleu
import torch

from nmt_lib.run.inference import SORTED_LINES, int8, sacrebleu_counts, translate_lines
from nmt_lib.run.published import load_published
from nmt_lib.run.records import bleu_interval
from nmt_lib.run.testsets import read_tatoeba_test

CPU_BATCH = 32
# Source pieces/s of `translate --model published` before this benchmark, as a learner
# ran it (issue 50): the whole Tatoeba test, batches of 64 in input order, one thread
# of an AMD EPYC with AVX2.
ISSUE_50_AVX2 = 655


def timed_translation(ckpt, sources, block: int) -> tuple[float, list[str]]:
    """Seconds to translate `sources` greedily, `block` lines read at a time (sorted by
    length within them), and the translations."""
    start = time.perf_counter()
    hyps = [
        h
        for i in range(0, len(sources), block)
        for h in translate_lines(ckpt, sources[i : i + block], batch_size=CPU_BATCH)
    ]
    return time.perf_counter() - start, hyps


def bench_cpu_translation(args, report) -> dict:
    pairs = read_tatoeba_test()[: args.cpu_lines]
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    fp32 = load_published(device="cpu")
    quantised = int8(load_published(device="cpu"))
    pieces = sum(len(fp32.src_vocab.split(fp32.prepare(s))) for s in sources)
    metric, threads = sacrebleu.BLEU(), torch.get_num_threads()
    torch.set_num_threads(1)
    runs, hyps = {}, {}
    for name, ckpt, block in (
        ("input order", fp32, CPU_BATCH),
        ("sorted", fp32, SORTED_LINES),
        ("sorted, int8", quantised, SORTED_LINES),
    ):
        seconds, hyps[name] = timed_translation(ckpt, sources, block)
        runs[name] = {
            "seconds": seconds,
            "pieces_per_sec": pieces / seconds,
            "sacrebleu": metric.corpus_score(hyps[name], [refs]).score,
        }
        report(
            f"one core, {name}: {runs[name]['pieces_per_sec']:,.0f} source pieces/s, "
            f"BLEU {runs[name]['sacrebleu']:.2f}"
        )
    torch.set_num_threads(threads)
    low, high = bleu_interval(
        sacrebleu_counts(hyps["sorted, int8"], refs),
        sacrebleu_counts(hyps["sorted"], refs),
    )
    return {
        "lines": len(sources),
        "source_pieces": pieces,
        "batch_size": CPU_BATCH,
        "threads": 1,
        # after scoring, it names the references (a fresh BLEU's does not: issue 65)
        "signature": str(metric.get_signature()),
        **runs,
        "int8_minus_fp32": {
            "bleu": runs["sorted, int8"]["sacrebleu"] - runs["sorted"]["sacrebleu"],
            "low": low,
            "high": high,
        },
        "issue_50_avx2_pieces_per_sec": ISSUE_50_AVX2,
    }


def translation_rows(c: dict) -> list:
    """The one-core figures of the book's benchmark table, with their targets."""
    speeds = " / ".join(
        f"{c[k]['pieces_per_sec']:,.0f}"
        for k in ("input order", "sorted", "sorted, int8")
    )
    d = c["int8_minus_fp32"]
    return [
        [
            f"translation on one CPU core: the Tatoeba test ({c['lines']:,} lines,"
            f" {c['source_pieces']:,} source pieces), greedy, batch {c['batch_size']},"
            " source pieces/s: input order / sorted by length / sorted, int8",
            f"{speeds} (a learner's run of the command line measured"
            f" {c['issue_50_avx2_pieces_per_sec']} on an AVX2 EPYC, batch 64, input"
            " order)",
            "int8 ≥ 2,000",
        ],
        [
            "BLEU of the same: fp32 sorted / int8; int8 − fp32 (95% paired-bootstrap"
            " interval)",
            f"{c['sorted']['sacrebleu']:.2f} / {c['sorted, int8']['sacrebleu']:.2f};"
            f" **{d['bleu']:+.2f}** ({d['low']:+.2f} to {d['high']:+.2f})",
            "≥ −0.5",
        ],
    ]
