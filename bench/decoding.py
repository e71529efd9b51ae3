"""Decoding speed: held-out sentences translated four ways by the course's published
model (or `--checkpoint`), and the peak memory of `translate` (book/benchmarks.md).

Every round decodes all the sentences each way, one way after the other:
  batched_greedy   `translate()` in batches of 256 with the KV cache; finished
                   sentences leave the batch (chapter 10's `greedy_decode_fast`);
  beam4            beam search, K = 4, the same batches;
  one_at_a_time    one sentence per call, no cache: every step reruns the decoder and
                   the output layer over the whole prefix (`greedy_decode_nocache`);
  one_at_a_time_last_position   the same, with the output layer on the newest
                   position only, as in d2l's predict_seq2seq: context for the ratio.
Then `python -m nmt_lib translate` with beam 4 and beam 64 over the same sentences,
each in a process of its own, for its peak resident memory.
"""

import statistics
import subprocess
import sys
import time
from pathlib import Path

from nmt_lib.base.download import fra_eng_path
from nmt_lib.decoding import greedy_decode_nocache, translate
from nmt_lib.run.corpus import ParallelCorpus
from nmt_lib.run.inference import MAX_OUTPUT, search_for
from nmt_lib.run.published import PUBLISHED, load_model

ROOT = Path(__file__).resolve().parent.parent
DECODE_BATCH = 256

# A small parent counts the peak memory (ru_maxrss includes the image a child forks
# from, gigabytes by then): it prints the command's peak (kB), exits with its status.
LAUNCHER = (
    "import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:]); _, status, usage ="
    " os.wait4(p.pid, 0); print(usage.ru_maxrss, file=sys.stderr);"
    " sys.exit(os.waitstatus_to_exitcode(status))"
)


def peak_memory_mb(model_options: list[str], sentences, beam: int) -> float:
    """Peak resident memory (MB) of `python -m nmt_lib translate --beam K` over
    `sentences` with the model `model_options` name."""
    command = [sys.executable, "-m", "nmt_lib", "translate", *model_options]
    command += ["--beam", str(beam), "--threads", "2"]
    run = subprocess.run(
        [sys.executable, "-c", LAUNCHER, *command],
        input="\n".join(sentences) + "\n",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    if run.returncode != 0:
        raise SystemExit(f"translate --beam {beam} failed: {run.stderr[-2000:]}")
    return int(run.stderr.strip().splitlines()[-1]) / 1024  # kilobytes on Linux


def nocache_last_position(model, src, src_len, **kw):
    """`greedy_decode_nocache`, the output layer's input cut to (B, 1, D) by a hook."""
    hook = model.decoder.dense.register_forward_pre_hook(lambda _, x: (x[0][:, -1:],))
    try:
        return greedy_decode_nocache(model, src, src_len, **kw)
    finally:
        hook.remove()


def bench_decoding(args, report) -> dict:
    ckpt = load_model(args.checkpoint, "published")
    # a published model's settings name no file: it was trained on the course's corpus
    data = None if args.checkpoint else fra_eng_path()
    vocabularies = (ckpt.src_vocab, ckpt.tgt_vocab)
    corpus = ParallelCorpus.from_settings(
        ckpt.payload["data"], data, vocabularies=vocabularies
    )
    if args.checkpoint:
        source = f"the checkpoint {args.checkpoint} ({ckpt.step:,} updates)"
        model_options = ["--checkpoint", str(Path(args.checkpoint).resolve())]
    else:
        source = f"the published model models/{PUBLISHED}"
        model_options = ["--model", "published"]
    sentences = list(dict.fromkeys(s for s, _ in corpus.splits.test))
    sentences = sentences[: args.decode_sentences]
    model = ckpt.model
    vocab = dict(src_vocab=ckpt.src_vocab, tgt_vocab=ckpt.tgt_vocab, max_len=MAX_OUTPUT)
    vocab["prepare"] = ckpt.prepare  # as the model was trained: lowercased, or not
    batched = lambda search: translate(
        model, sentences, **vocab, batch_size=DECODE_BATCH, search=search
    )
    singly = lambda search: [
        translate(model, [s], **vocab, batch_size=1, search=search) for s in sentences
    ]
    ways = {
        "batched_greedy": lambda: batched(search_for(1)),
        "beam4": lambda: batched(search_for(4)),
        "one_at_a_time": lambda: singly(greedy_decode_nocache),
        "one_at_a_time_last_position": lambda: singly(nocache_last_position),
    }
    rates = {name: [] for name in ways}
    translate(model, sentences[:8], **vocab)  # warm-up
    for r in range(args.decode_rounds):
        for name, way in ways.items():
            start = time.perf_counter()
            way()
            rates[name].append(len(sentences) / (time.perf_counter() - start))
        report(
            f"decoding round {r + 1}/{args.decode_rounds}: "
            + ", ".join(f"{k} {v[-1]:,.1f}" for k, v in rates.items())
            + " sentences/s"
        )
    ratio = lambda a, b: statistics.median(x / y for x, y in zip(rates[a], rates[b]))
    return {
        "model": source,
        "sentences": len(sentences),
        "batch_size": DECODE_BATCH,
        **{
            k: {"sentences_per_sec_median": statistics.median(v), "rounds": v}
            for k, v in rates.items()
        },
        "ratio_decode_batched_vs_one_at_a_time": ratio(
            "batched_greedy", "one_at_a_time"
        ),
        "ratio_decode_beam4_vs_one_at_a_time": ratio("beam4", "one_at_a_time"),
        "ratio_decode_batched_vs_one_at_a_time_last_position": ratio(
            "batched_greedy", "one_at_a_time_last_position"
        ),
        "peak_memory_mb": {
            f"beam{k}": peak_memory_mb(model_options, sentences, k) for k in (4, 64)
        },
    }


def decoding_rows(d: dict) -> list:
    """The decoding figures of the book's benchmark table, with their targets."""
    speeds = " / ".join(
        f"{d[k]['sentences_per_sec_median']:,.1f}"
        for k in ("batched_greedy", "beam4", "one_at_a_time")
    )
    return [
        [
            f"decoding {d['sentences']} held-out sentences, sentences/s: batched"
            " greedy with KV cache / beam 4 / one at a time without cache",
            speeds,
            "",
        ],
        [
            "decoding, batched greedy / one at a time",
            f"**{d['ratio_decode_batched_vs_one_at_a_time']:.1f}×**",
            "≥ 30×",
        ],
        [
            "the same, against one at a time with the output layer on the newest"
            " position only",
            f"{d['ratio_decode_batched_vs_one_at_a_time_last_position']:.1f}×",
            "context",
        ],
        [
            "peak memory of `translate` over the same sentences: beam 4 / beam 64",
            " / ".join(
                f"{d['peak_memory_mb'][k]:,.0f} MB" for k in ("beam4", "beam64")
            ),
            "context",
        ],
    ]
