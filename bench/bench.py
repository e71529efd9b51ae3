#!/usr/bin/env python3
"""How fast the course trains and decodes, against a d2l-style baseline and
torch.nn.Transformer.

    python bench/bench.py     # the full benchmark (about 10 minutes on 2 CPU cores)
    python bench/bench.py --rounds 2 --steps 2 --decode-sentences 40 --skip-nbval

Each comparison runs its contenders alternately, in this one process, on the same
batches, for several rounds; it reports the median of the per-round ratios, because on
these shared machines absolute speeds drift from minute to minute while a ratio measured
within one round holds. 2 CPU threads, fp32. Results: a table on stdout and
bench/results/latest.json.

Contenders (training), all at d_model 256, 3 + 3 layers, 8 heads, d_ff 1024, dropout
0.1, Adam, gradient clipping at norm 1, on batches of 128 sentences from the first
50,000 training pairs:
  course   nmt_lib's Transformer with chapter 10's switches on, as `python -m nmt_lib
           train` trains: FastDropout (use_fast_dropout), length-bucketed batches, the
           output layer and the loss together on real target tokens only
           (sliced_batch_loss), fused Adam with the paper's settings, and chapter 9's
           update (apply_update: clipping, Adam, the warm-up schedule);
  d2l      the book's blocks (d2l.MultiHeadAttention, AddNorm, PositionWiseFFN) with
           valid-length masking, every batch padded to num_steps=20, the loss, loop and
           optimizer (torch.optim.Adam) of d2l's train_seq2seq;
  torch    torch.nn.Transformer with embeddings, sinusoidal positions and an output
           layer, fed the course's batches, with the course's loss on real tokens and
           the course's optimizer.
The course and torch contenders see the same batches; the d2l-style one sees the same
sentences, padded its own way.

Decoding: 500 held-out sentences with the course's published model
(models/tatoeba-en-fr, or --checkpoint); every round decodes all of them each way, one
way after the other:
  batched_greedy   translate() in batches of 256 with the KV cache; finished sentences
                   leave the batch;
  beam4            beam search, K = 4, same batches;
  one_at_a_time    one sentence per call, no cache: every step reruns the decoder and
                   the output layer over the whole prefix
                   (nmt_lib.transformer.greedy_decode_nocache);
  one_at_a_time_last_position   the same, but the output layer sees only the newest
                   position, as in d2l's predict_seq2seq; context for the ratio, not a
                   target.
and the peak memory of `python -m nmt_lib translate` with beam 4 and beam 64 over the
same sentences, each in a process of its own (batches of 64 sentences, 64 x 64 beams in
the second).

Translation on one CPU core: the published model over the public Tatoeba test
(--cpu-lines, all 12,681 by default), greedy, batches of 32, in source pieces per
second: batches in input order, sorted by length (as `translate` does), and sorted with
int8 linear layers (`translate --int8`), each with its sacreBLEU, and int8's BLEU
difference with chapter 4a's paired-bootstrap interval.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nmt_lib.data import NMTData, collate  # noqa: E402
from nmt_lib.base.device import autocast_dtype  # noqa: E402
from nmt_lib.run.records import write_record  # noqa: E402
from nmt_lib.run.corpus import preparer  # noqa: E402
from nmt_lib.decoding import beam_search, greedy_decode_nocache, translate  # noqa: E402
from nmt_lib.fast import greedy_decode_fast  # noqa: E402
from nmt_lib.fast import (  # noqa: E402
    linear_cross_entropy,
    sliced_batch_loss,
    token_features,
    use_fast_dropout,
)
from nmt_lib.positional import sinusoidal_table  # noqa: E402
from nmt_lib.recipes import paper_adam  # noqa: E402
from nmt_lib.text import load_fra_eng, split_pairs  # noqa: E402
from nmt_lib.training import TrainSettings, apply_update, noam_schedule  # noqa: E402
from nmt_lib.transformer import Transformer, TransformerConfig  # noqa: E402

D_MODEL, HEADS, D_FF, LAYERS, DROPOUT, BATCH, PAIRS, NUM_STEPS = (
    256,
    8,
    1024,
    3,
    0.1,
    128,
    50_000,
    20,
)
DECODE_BATCH, LR = 256, 1e-4
# the update of `course_step`
SETTINGS = TrainSettings(label_smoothing=0.0, clip=1.0, warmup=4000)


# --------------------------------------------------------------------------------------
# The d2l-style baseline: the book's decoder block, written the way its Transformer
# chapter does (d2l 1.0.3 ships the encoder but not the decoder), trained with
# train_seq2seq's loss and loop.


class D2LDecoderBlock(nn.Module):
    def __init__(self, i):
        super().__init__()
        import d2l.torch as d2l

        self.i = i
        self.attention1 = d2l.MultiHeadAttention(D_MODEL, HEADS, DROPOUT)
        self.addnorm1 = d2l.AddNorm(D_MODEL, DROPOUT)
        self.attention2 = d2l.MultiHeadAttention(D_MODEL, HEADS, DROPOUT)
        self.addnorm2 = d2l.AddNorm(D_MODEL, DROPOUT)
        self.ffn = d2l.PositionWiseFFN(D_FF, D_MODEL)
        self.addnorm3 = d2l.AddNorm(D_MODEL, DROPOUT)

    def forward(self, X, state):
        enc_outputs, enc_valid_lens = state[0], state[1]
        key_values = (
            X if state[2][self.i] is None else torch.cat((state[2][self.i], X), dim=1)
        )
        state[2][self.i] = key_values
        if self.training:  # causal masking by valid lengths: query t sees keys 1..t
            B, T, _ = X.shape
            dec_valid_lens = torch.arange(1, T + 1, device=X.device).repeat(B, 1)
        else:
            dec_valid_lens = None
        Y = self.addnorm1(X, self.attention1(X, key_values, key_values, dec_valid_lens))
        Z = self.addnorm2(
            Y, self.attention2(Y, enc_outputs, enc_outputs, enc_valid_lens)
        )
        return self.addnorm3(Z, self.ffn(Z)), state


class D2LTransformer(nn.Module):
    def __init__(self, src_vocab, tgt_vocab):
        super().__init__()
        import d2l.torch as d2l

        self.encoder = d2l.TransformerEncoder(
            src_vocab, D_MODEL, D_FF, HEADS, LAYERS, DROPOUT
        )
        self.embedding = nn.Embedding(tgt_vocab, D_MODEL)
        self.pos_encoding = d2l.PositionalEncoding(D_MODEL, DROPOUT)
        self.blks = nn.ModuleList(D2LDecoderBlock(i) for i in range(LAYERS))
        self.dense = nn.Linear(D_MODEL, tgt_vocab)

    def forward(self, src, src_valid_len, dec_input):
        enc_outputs = self.encoder(src, src_valid_len)
        state = [enc_outputs, src_valid_len, [None] * LAYERS]
        X = self.pos_encoding(self.embedding(dec_input) * math.sqrt(D_MODEL))
        for blk in self.blks:
            X, state = blk(X, state)
        return self.dense(X)


def d2l_masked_loss(pred, label, valid_len):
    """train_seq2seq's MaskedSoftmaxCELoss: per-token CE, zero on padding, mean over
    num_steps."""
    weights = (torch.arange(label.shape[1])[None, :] < valid_len[:, None]).float()
    unweighted = F.cross_entropy(pred.permute(0, 2, 1), label, reduction="none")
    return (unweighted * weights).mean(dim=1)


def build_d2l(src_vocab, tgt_vocab, sample):
    import d2l.torch as d2l

    model = D2LTransformer(src_vocab, tgt_vocab)
    with torch.no_grad():  # materialise the lazy layers, then initialise them
        model(sample.src[:2], sample.src_len[:2], sample.tgt_in[:2])
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
    return model, d2l.grad_clipping


# --------------------------------------------------------------------------------------
class TorchTransformer(nn.Module):
    """torch.nn.Transformer with embeddings, sinusoidal positions and an output
    layer."""

    def __init__(self, src_vocab, tgt_vocab, pad_id=0):
        super().__init__()
        self.pad_id = pad_id
        self.src_emb, self.tgt_emb = (
            nn.Embedding(src_vocab, D_MODEL),
            nn.Embedding(tgt_vocab, D_MODEL),
        )
        self.register_buffer("pe", sinusoidal_table(512, D_MODEL), persistent=False)
        self.drop = nn.Dropout(DROPOUT)
        self.core = nn.Transformer(
            D_MODEL, HEADS, LAYERS, LAYERS, D_FF, DROPOUT, batch_first=True
        )
        self.out = nn.Linear(D_MODEL, tgt_vocab)

    def hidden(self, src, src_len, tgt_in):
        """The decoder's output states (B, T, D), before the output layer."""
        S, T = src.shape[1], tgt_in.shape[1]
        x = self.drop(self.src_emb(src) * math.sqrt(D_MODEL) + self.pe[:S])
        y = self.drop(self.tgt_emb(tgt_in) * math.sqrt(D_MODEL) + self.pe[:T])
        src_pad = torch.arange(S)[None, :] >= src_len[:, None]  # True: ignore
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        return self.core(
            x,
            y,
            tgt_mask=causal,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_in == self.pad_id,
            memory_key_padding_mask=src_pad,
            tgt_is_causal=True,
        )

    def forward(self, src, src_len, tgt_in):
        return self.out(self.hidden(src, src_len, tgt_in))

    def token_features(self, src, src_len, tgt_in, keep):
        """The decoder's output (N, D) at the kept positions, as the course's models
        offer it."""
        return self.hidden(src, src_len, tgt_in)[keep]


def non_embedding_parameters(model) -> int:
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    return sum(p.numel() for p in model.parameters() if id(p) not in embedded)


def matmul_peak(n=1024, repeats=20, dtype=torch.float32) -> float:
    """Best GFLOP/s of an n x n matrix product in `dtype`, over `repeats` timed
    products."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e9


class Contender:
    def __init__(self, name, model, step, optimizer, dtype=None):
        self.name, self.model, self.step, self.optimizer = name, model, step, optimizer
        self.dtype = dtype  # autocast dtype of the forward pass; None: fp32
        self.schedule = noam_schedule(
            optimizer, d_model=D_MODEL, warmup=SETTINGS.warmup
        )
        self.rates = []

    def run(self, batches) -> float:
        """Train on `batches` (lists of sentence indices); return real target tokens per
        second."""
        self.model.train()
        start, tokens = time.perf_counter(), 0
        for items in batches:
            tokens += self.step(self, items)
        rate = tokens / (time.perf_counter() - start)
        self.rates.append(rate)
        return rate


def output_layer(model) -> nn.Linear:
    return model.decoder.dense if isinstance(model, Transformer) else model.out


def features(model, src, src_len, tgt_in, keep):
    """The decoder's output (N, D) at the real target positions, for the course's model
    or torch's."""
    if isinstance(model, Transformer):
        return token_features(model, src, src_len, tgt_in, keep)
    return model.token_features(src, src_len, tgt_in, keep)


def sliced_loss(model, batch, settings, pad_id: int):
    """Chapter 10's `sliced_batch_loss` for the course's model; the same computation for
    torch's."""
    if isinstance(model, Transformer):
        return sliced_batch_loss(model, batch, settings, pad_id)
    keep = batch.tgt_out != pad_id
    hidden = features(model, batch.src, batch.src_len, batch.tgt_in, keep)
    with torch.autocast("cpu", enabled=False):
        loss = linear_cross_entropy(
            hidden.float(),
            output_layer(model),
            batch.tgt_out[keep],
            label_smoothing=settings.label_smoothing,
        )
    return loss, int(keep.sum())


def course_step(pad, dataset, c, items):
    """One update as the command line's trainer makes it from one micro-batch: the
    sliced loss under autocast at the contender's precision (as `--precision` does),
    then chapter 9's `apply_update`.
    """
    b = collate([dataset[i] for i in items], **pad)
    with torch.autocast("cpu", dtype=c.dtype, enabled=c.dtype is not None):
        loss, n = sliced_loss(c.model, b, SETTINGS, pad["pad_id"])
    loss.backward()
    apply_update(list(c.model.parameters()), c.optimizer, c.schedule, n, SETTINGS.clip)
    return n


def d2l_step(pad, dataset, clip, c, items):
    # d2l: fixed num_steps padding
    b = collate([dataset[i] for i in items], **pad, num_steps=NUM_STEPS)
    y_hat = c.model(b.src, b.src_len, b.tgt_in)
    loss = d2l_masked_loss(y_hat, b.tgt_out, b.tgt_len)
    c.optimizer.zero_grad(set_to_none=True)
    loss.sum().backward()
    clip(c.model, 1)
    c.optimizer.step()
    return int(b.tgt_len.sum())


def median_ratio(a, b):
    return statistics.median(x / y for x, y in zip(a, b))


def round_batches(batches, dataset, rounds: int, steps: int) -> list:
    """`rounds` disjoint lists of `steps` batches, each with the sentence-length mix of
    the whole epoch.

    The d2l-style model pads every batch to num_steps, so its time per batch is fixed
    while the course's follows the batch's length: a round of short sentences favours
    the course, one of long sentences the baseline. So the batches are sorted by target
    length, rounds x steps of them are taken at even spacing (the epoch's length
    distribution), and dealt out like cards, forwards then backwards, so that every
    round runs from short to long with about the same total length.
    """
    need = rounds * steps
    if need > len(batches):
        raise SystemExit(
            f"--rounds x --steps needs {need} batches, the data has {len(batches)}"
        )
    length = lambda b: sum(len(dataset.tgt[i]) for i in b) / len(b)
    ordered = sorted(batches, key=length)
    picked = [ordered[int((k + 0.5) * len(ordered) / need)] for k in range(need)]
    dealt = [[] for _ in range(rounds)]
    for k, batch in enumerate(picked):
        turn, r = divmod(k, rounds)
        dealt[r if turn % 2 == 0 else rounds - 1 - r].append(batch)
    return dealt


def bench_training(args, report):
    pairs = split_pairs(load_fra_eng()).train[:PAIRS]
    data = NMTData(pairs, valid_frac=0.0, test_frac=0.0, min_freq=2)
    loader = data.loader("train", batch_size=BATCH, seed=0)
    dataset, sampler = loader.dataset, loader.batch_sampler
    batches = list(sampler)
    pad = dict(
        pad_id=data.tgt_vocab.pad_id,
        bos_id=data.tgt_vocab.bos_id,
        eos_id=data.tgt_vocab.eos_id,
    )
    V_src, V_tgt = len(data.src_vocab), len(data.tgt_vocab)
    padded = collate([dataset[i] for i in batches[0]], **pad, num_steps=NUM_STEPS)

    torch.manual_seed(0)
    course = use_fast_dropout(
        Transformer(
            TransformerConfig(
                V_src,
                V_tgt,
                d_model=D_MODEL,
                n_heads=HEADS,
                d_ff=D_FF,
                n_layers=LAYERS,
                dropout=DROPOUT,
            )
        )
    )
    d2l_model, clip = build_d2l(V_src, V_tgt, padded)
    torch_model = TorchTransformer(V_src, V_tgt)
    contenders = [
        Contender(
            "course",
            course,
            partial(course_step, pad, dataset),
            paper_adam(course.parameters(), LR, fused=True),
        ),
        Contender(
            "d2l",
            d2l_model,
            partial(d2l_step, pad, dataset, clip),
            torch.optim.Adam(d2l_model.parameters(), lr=LR),
        ),  # as train_seq2seq does
        Contender(
            "torch",
            torch_model,
            partial(course_step, pad, dataset),
            paper_adam(torch_model.parameters(), LR, fused=True),
        ),
    ]
    low = autocast_dtype("bf16" if args.bf16 else "auto", "cpu")
    # the same contenders again, computing in bf16 (d2l's way stays fp32)
    if low is not None:
        torch.manual_seed(0)
        course16 = use_fast_dropout(Transformer(course.cfg))
        course16.load_state_dict(course.state_dict())
        torch16 = TorchTransformer(V_src, V_tgt)
        torch16.load_state_dict(torch_model.state_dict())
        contenders += [
            Contender(
                "course_bf16",
                course16,
                partial(course_step, pad, dataset),
                paper_adam(course16.parameters(), LR, fused=True),
                dtype=low,
            ),
            Contender(
                "torch_bf16",
                torch16,
                partial(course_step, pad, dataset),
                paper_adam(torch16.parameters(), LR, fused=True),
                dtype=low,
            ),
        ]
    rounds = round_batches(batches, dataset, args.rounds, args.steps)
    for c in contenders:  # warm-up, untimed
        c.run(batches[:2])
        c.rates.clear()
    peaks = [matmul_peak()]
    for r, chunk in enumerate(rounds):
        # alternate who goes first
        order = contenders if r % 2 == 0 else contenders[::-1]
        for c in order:
            c.run(chunk)
        report(
            f"round {r + 1}/{args.rounds}: "
            + ", ".join(f"{c.name} {c.rates[-1]:,.0f}" for c in contenders)
            + " target tok/s"
        )
    peaks.append(matmul_peak())
    peak = max(peaks)

    real = sum(
        int(collate([dataset[i] for i in b], **pad).tgt_len.sum()) for b in batches
    )
    bucket_positions = sum(
        collate([dataset[i] for i in b], **pad).tgt_out.numel() for b in batches
    )
    d2l_positions = len(pairs) * NUM_STEPS
    d2l_real = sum(min(len(t) + 1, NUM_STEPS) for t in dataset.tgt)
    out = {
        "peak_matmul_gflops": peak,
        "padding": {
            "course_bucketed": 1 - real / bucket_positions,
            "d2l_num_steps_20": 1 - d2l_real / d2l_positions,
        },
        "batches_per_round": args.steps,
        "rounds": args.rounds,
        "sentences_per_batch": BATCH,
        "training_pairs": len(pairs),
    }
    for c in contenders:
        rate = statistics.median(c.rates)
        params = non_embedding_parameters(c.model)
        out[c.name] = {
            "tokens_per_sec_median": rate,
            "tokens_per_sec_rounds": c.rates,
            "non_embedding_parameters": params,
            "mfu": 6 * params * rate / (peak * 1e9),
        }
    out["ratio_train_vs_d2l"] = median_ratio(contenders[0].rates, contenders[1].rates)
    out["ratio_train_vs_nn_transformer"] = median_ratio(
        contenders[0].rates, contenders[2].rates
    )
    if low is None:
        out["bf16"] = {
            "measured": False,
            "reason": (
                "this CPU has no native bf16 (AVX-512 BF16 or AMX): PyTorch would"
                " emulate it, far slower than fp32, so precision=auto trains in fp32"
                " and the fp32 targets apply"
            ),
        }
    else:
        peak16 = max(matmul_peak(dtype=torch.bfloat16) for _ in range(2))
        c16, t16 = contenders[3], contenders[4]
        out["bf16"] = {
            "measured": True,
            "peak_matmul_gflops": peak16,
            "ratio_course_bf16_vs_fp32": median_ratio(c16.rates, contenders[0].rates),
            "ratio_course_bf16_vs_d2l": median_ratio(c16.rates, contenders[1].rates),
            "ratio_course_vs_nn_transformer_bf16": median_ratio(c16.rates, t16.rates),
            "mfu_course_bf16": out["course_bf16"]["mfu"] * peak / peak16,
        }
    return out


# --------------------------------------------------------------------------------------
def decoding_model(args, report):
    """The model to decode with, its corpus, a description, and the options that give
    `translate` the same model: `--checkpoint` if given, else the course's published
    model, else a small model trained here.
    """
    from nmt_lib.run.checkpoint import load_checkpoint, save_checkpoint
    from nmt_lib.run.corpus import ParallelCorpus
    from nmt_lib.base.download import fra_eng_path
    from nmt_lib.run.published import MODELS, PUBLISHED, load_published
    from nmt_lib.run.settings import RunSettings
    from nmt_lib.run.trainer import train_run

    path = Path(args.checkpoint) if args.checkpoint else None
    if path is not None and path.is_file():
        ckpt = load_checkpoint(path)
        corpus = ParallelCorpus.from_settings(
            ckpt.payload["data"], vocabularies=(ckpt.src_vocab, ckpt.tgt_vocab)
        )
        shown = (
            path.resolve().relative_to(ROOT)
            if path.resolve().is_relative_to(ROOT)
            else path
        )
        return (
            ckpt.model,
            corpus,
            f"the checkpoint {shown} ({ckpt.step:,} updates)",
            ["--checkpoint", str(path)],
        )
    if path is None and (MODELS / PUBLISHED).is_dir():
        ckpt = load_published()
        corpus = ParallelCorpus.from_settings(
            ckpt.payload["data"],
            fra_eng_path(),
            vocabularies=(ckpt.src_vocab, ckpt.tgt_vocab),
        )
        return (
            ckpt.model,
            corpus,
            f"the published model models/{PUBLISHED}",
            ["--model", "published"],
        )
    report(
        f"no checkpoint at {path}: training a small model for the decoding benchmark"
        if path
        else "no published model: training a small model for the decoding benchmark"
    )
    corpus = ParallelCorpus(max_pairs=PAIRS, min_freq=2)
    torch.manual_seed(0)
    model = Transformer(
        TransformerConfig(len(corpus.src_vocab), len(corpus.tgt_vocab), n_layers=2)
    )
    train_run(
        model,
        corpus,
        RunSettings(
            epochs=1,
            max_steps=args.fallback_steps,
            warmup=100,
            loss="sliced",
            fused_adam=True,
            fast_dropout=True,
        ),
        report="none",
    )
    path = ROOT / "build" / "bench-fallback.pt"
    save_checkpoint(
        path, model, corpus.src_vocab, corpus.tgt_vocab, data=corpus.settings
    )
    return (
        model,
        corpus,
        (
            f"a d_model-128, 2 + 2-layer model trained here for {args.fallback_steps}"
            " updates (no published model)"
        ),
        ["--checkpoint", str(path)],
    )


# Peak memory must be counted from a small parent: Linux's ru_maxrss includes the image
# a child is forked from before it exec()s, and this process is gigabytes large by then.
# The launcher is a fresh, small Python that starts the command and prints the command's
# own peak (kilobytes), then exits with its status.
LAUNCHER = (
    "import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:]); _, status, usage ="
    " os.wait4(p.pid, 0); print(usage.ru_maxrss, file=sys.stderr);"
    " sys.exit(os.waitstatus_to_exitcode(status))"
)


def peak_memory_mb(model_options: list[str], sentences, beam: int) -> float:
    """Peak resident memory (MB) of `python -m nmt_lib translate --beam K` over
    `sentences`, with the model `model_options` name (`--checkpoint PATH` or `--model
    FOLDER`), in a process of its own (the operating system's count for that process,
    model and Python included)."""
    cmd = [
        sys.executable,
        "-c",
        LAUNCHER,
        sys.executable,
        "-m",
        "nmt_lib",
        "translate",
        *model_options,
        "--beam",
        str(beam),
        "--threads",
        "2",
    ]
    run = subprocess.run(
        cmd,
        input="\n".join(sentences) + "\n",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    if run.returncode != 0:
        raise SystemExit(f"translate --beam {beam} failed: {run.stderr[-2000:]}")
    return int(run.stderr.strip().splitlines()[-1]) / 1024  # kilobytes on Linux


class LastPosition(nn.Module):
    """Wraps an output layer so that it only sees the newest position: (B, T, D) -> (B,
    1, V)."""

    def __init__(self, dense):
        super().__init__()
        self.dense = dense

    def forward(self, x):
        return self.dense(x[:, -1:])


def nocache_last_position(model, src, src_len, **kw):
    """greedy_decode_nocache with the output layer on the newest position only."""
    dense = model.decoder.dense
    model.decoder.dense = LastPosition(dense)
    try:
        return greedy_decode_nocache(model, src, src_len, **kw)
    finally:
        model.decoder.dense = dense


def bench_decoding(args, report):
    model, corpus, source, model_options = decoding_model(args, report)
    sentences = list(dict.fromkeys(s for s, _ in corpus.splits.test))[
        : args.decode_sentences
    ]
    vocab = dict(
        src_vocab=corpus.src_vocab,
        tgt_vocab=corpus.tgt_vocab,
        max_len=80,
        prepare=preparer(corpus.settings),
    )  # as the model was trained: lowercased, or as written
    rounds = args.decode_rounds
    rates = {
        "batched_greedy": [],
        "beam4": [],
        "one_at_a_time": [],
        "one_at_a_time_last_position": [],
    }

    def timed(fn):
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    translate(model, sentences[:8], **vocab)  # warm-up
    for r in range(rounds):
        single = timed(
            lambda: [
                translate(
                    model, [s], **vocab, batch_size=1, search=greedy_decode_nocache
                )
                for s in sentences
            ]
        )
        rates["one_at_a_time"].append(len(sentences) / single)
        rates["batched_greedy"].append(
            len(sentences)
            / timed(
                lambda: translate(
                    model,
                    sentences,
                    **vocab,
                    batch_size=DECODE_BATCH,
                    search=greedy_decode_fast,
                )
            )
        )
        rates["beam4"].append(
            len(sentences)
            / timed(
                lambda: translate(
                    model,
                    sentences,
                    **vocab,
                    batch_size=DECODE_BATCH,
                    search=partial(beam_search, beam_size=4),
                )
            )
        )
        last = timed(
            lambda: [
                translate(
                    model, [s], **vocab, batch_size=1, search=nocache_last_position
                )
                for s in sentences
            ]
        )
        rates["one_at_a_time_last_position"].append(len(sentences) / last)
        report(
            f"decoding round {r + 1}/{rounds}: "
            + ", ".join(f"{k} {v[-1]:,.1f}" for k, v in rates.items())
            + " sentences/s"
        )
    return {
        "model": source,
        "sentences": len(sentences),
        "batch_size": DECODE_BATCH,
        **{
            k: {"sentences_per_sec_median": statistics.median(v), "rounds": v}
            for k, v in rates.items()
        },
        "ratio_decode_batched_vs_one_at_a_time": median_ratio(
            rates["batched_greedy"], rates["one_at_a_time"]
        ),
        "ratio_decode_beam4_vs_one_at_a_time": median_ratio(
            rates["beam4"], rates["one_at_a_time"]
        ),
        "peak_memory_mb": {
            f"beam{k}": peak_memory_mb(model_options, sentences, k) for k in (4, 64)
        },
        "ratio_decode_batched_vs_one_at_a_time_last_position": median_ratio(
            rates["batched_greedy"], rates["one_at_a_time_last_position"]
        ),
    }


# --------------------------------------------------------------------------------------
CPU_BATCH = 32
# source pieces/s of `translate --model published` before this benchmark: the whole
# Tatoeba test,
ISSUE_50_AVX2 = 655
# batches of 64 in input order, one thread of an AMD EPYC with AVX2 (issue 50, as a user
# ran it)


def source_pieces(ckpt, sources) -> int:
    return sum(len(ckpt.src_vocab.split(ckpt.prepare(s))) for s in sources)


def timed_translation(ckpt, sources, refs, block, pieces: int) -> dict:
    """Greedy translations of `sources` (`pieces` source pieces) in batches of
    CPU_BATCH, `block` lines read at a time (sorted by length within it), timed, with
    their sacreBLEU against `refs`."""
    import sacrebleu

    from nmt_lib.run.inference import translate_lines

    t = time.perf_counter()
    hyps = [
        h
        for i in range(0, len(sources), block)
        for h in translate_lines(ckpt, sources[i : i + block], batch_size=CPU_BATCH)
    ]
    seconds = time.perf_counter() - t
    return {
        "seconds": seconds,
        "pieces_per_sec": pieces / seconds,
        "hypotheses": hyps,
        "sacrebleu": sacrebleu.BLEU().corpus_score(hyps, [refs]).score,
    }


SHALLOW = (
    "quick-baseline",
    "quick-deep6-shallow2",
)  # speedrun records: 6 + 6 blocks, and 6 + 2, one recipe


def bench_shallow_decoder(args, report, rounds: int = 3):
    """A shallow decoder's speed: the speedrun's quick baseline (6 encoder and 6 decoder
    blocks) and its record with 2 decoder blocks translate the test as
    `bench_cpu_translation` does (one core, sorted, fp32), in turn, `rounds` times.
    Their beam-4 BLEU and its interval are the speedrun table's. Needs their checkpoints
    in runs/speedrun/, each the one its record scored (each trains in 30 minutes, by the
    command in its record).
    """
    from nmt_lib.run.checkpoint import load_checkpoint
    from nmt_lib.run.inference import SORTED_LINES
    from nmt_lib.run.testsets import read_tatoeba_test

    models = {}
    for name in SHALLOW:
        path, record = (
            ROOT / "runs" / "speedrun" / f"{name}.pt",
            ROOT / "speedrun" / "records" / f"{name}.json",
        )
        record = json.loads(record.read_text(encoding="utf-8"))
        ckpt = load_checkpoint(path, device="cpu") if path.is_file() else None
        if ckpt is None or ckpt.step != record["updates"]:
            why = (
                f"runs/speedrun/{name}.pt is "
                + (
                    "missing"
                    if ckpt is None
                    else "not the checkpoint its record scored"
                )
                + ": make the record by the command it gives"
            )
            report(f"shallow decoder: not measured; {why}")
            return {"measured": False, "reason": why}
        models[
            f"{len(ckpt.model.encoder.blocks)} + {len(ckpt.model.decoder.blocks)}"
            " blocks"
        ] = ckpt, record
    pairs = read_tatoeba_test()[: args.cpu_lines]
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    pieces = {k: source_pieces(ckpt, sources) for k, (ckpt, _) in models.items()}
    speeds, threads = {k: [] for k in models}, torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for r in range(rounds):
            for k, (ckpt, _) in models.items():
                run = timed_translation(ckpt, sources, refs, SORTED_LINES, pieces[k])
                speeds[k].append(run["pieces_per_sec"])
                report(
                    f"one core, sorted, {k}, round {r + 1}/{rounds}:"
                    f" {run['pieces_per_sec']:,.0f} source pieces/s, greedy BLEU"
                    f" {run['sacrebleu']:.2f}"
                )
    finally:
        torch.set_num_threads(threads)
    (deep, deep_speeds), (shallow, shallow_speeds) = speeds.items()
    ratios = [a / b for a, b in zip(shallow_speeds, deep_speeds)]
    return {
        "measured": True,
        "lines": len(sources),
        "ratio_rounds": ratios,
        "models": {
            k: {
                "record": record["name"],
                "pieces_per_sec_rounds": speeds[k],
                "beam4_test": record["beam4"]["sacrebleu"],
            }
            for k, (_, record) in models.items()
        },
        "deep": deep,
        "shallow": shallow,
    }


def bench_cpu_translation(args, report):
    """The published model on one CPU core: the public Tatoeba test translated greedily
    in batches of 32, in source pieces per second, three ways: batches in input order
    (as `translate` read them before), sorted by length within the blocks of lines
    `translate` now reads at once, and the same with int8 linear layers. Each with its
    sacreBLEU; int8's difference from fp32 with chapter 4a's paired-bootstrap interval.
    """
    import numpy as np
    import sacrebleu

    from nmt_lib.metrics import bleu_from_counts, paired_bootstrap
    from nmt_lib.run.inference import SORTED_LINES, int8, sacrebleu_counts
    from nmt_lib.run.published import load_published
    from nmt_lib.run.testsets import read_tatoeba_test

    pairs = read_tatoeba_test()[: args.cpu_lines]
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    fp32, quantised = load_published(device="cpu"), int8(load_published(device="cpu"))
    pieces = source_pieces(fp32, sources)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    runs = {}
    for name, ckpt, block in (
        ("input order", fp32, CPU_BATCH),
        ("sorted", fp32, SORTED_LINES),
        ("sorted, int8", quantised, SORTED_LINES),
    ):
        runs[name] = timed_translation(ckpt, sources, refs, block, pieces)
        report(
            f"one core, {name}: {runs[name]['pieces_per_sec']:,.0f} source pieces/s, "
            f"BLEU {runs[name]['sacrebleu']:.2f}"
        )
    torch.set_num_threads(threads)
    metric = sacrebleu.BLEU()
    # its signature names the references it scored
    metric.corpus_score(runs["sorted"]["hypotheses"], [refs])
    counts = {k: sacrebleu_counts(v["hypotheses"], refs) for k, v in runs.items()}
    for (
        k,
        c,
        # chapter 4a's counts on sacreBLEU's tokens give sacreBLEU's score
    ) in counts.items():
        assert abs(bleu_from_counts(np.sum(c, axis=0)) - runs[k]["sacrebleu"]) < 0.01, k
    a, b = paired_bootstrap(counts["sorted, int8"], counts["sorted"])
    low, high = np.percentile(a - b, [2.5, 97.5])
    return {
        "lines": len(sources),
        "source_pieces": pieces,
        "batch_size": CPU_BATCH,
        "threads": 1,
        "signature": str(metric.get_signature()),
        **{
            k: {key: v[key] for key in ("seconds", "pieces_per_sec", "sacrebleu")}
            for k, v in runs.items()
        },
        "int8_minus_fp32": {
            "bleu": runs["sorted, int8"]["sacrebleu"] - runs["sorted"]["sacrebleu"],
            "low": low,
            "high": high,
        },
        "issue_50_avx2_pieces_per_sec": ISSUE_50_AVX2,
    }


CHAPTER_TARGET_S = (
    180  # issue 17: every chapter within 3 minutes in learner mode on 2 CPU cores
)


def notebook_wall_times(folder=ROOT / "notebooks") -> dict:
    """Learner-mode wall time of each committed notebook, from the cell timings nbclient
    records."""
    times = {}
    for path in sorted(Path(folder).glob("*.ipynb")):
        cells = [
            c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"
        ]
        stamps = [c.get("metadata", {}).get("execution", {}) for c in cells]
        starts = [
            s["iopub.execute_input"] for s in stamps if "iopub.execute_input" in s
        ]
        ends = [s["shell.execute_reply"] for s in stamps if "shell.execute_reply" in s]
        if starts and ends:
            parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))
            times[path.stem] = (parse(max(ends)) - parse(min(starts))).total_seconds()
    return times


def nbval_quick_wall() -> float:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "notebooks",
        "--nbval-lax",
        "--nbval-current-env",
        "-q",
        "--nbval-sanitize-with",
        "tools/nbval_sanitize.cfg",
    ]
    t = time.perf_counter()
    result = subprocess.run(
        cmd,
        cwd=ROOT,
        env=dict(os.environ, NMT_QUICK="1"),
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t
    if result.returncode != 0:
        raise SystemExit(f"nbval failed:\n{result.stdout[-3000:]}")
    return wall


def cpu_rows(c) -> list:
    if c is None:
        return []
    speeds = " / ".join(
        f"{c[k]['pieces_per_sec']:,.0f}"
        for k in ("input order", "sorted", "sorted, int8")
    )
    d = c["int8_minus_fp32"]
    return [
        [
            (
                f"translation on one CPU core: the Tatoeba test ({c['lines']:,} lines,"
                f" {c['source_pieces']:,} source pieces), greedy, batch"
                f" {c['batch_size']}, source pieces/s: input order / sorted by length /"
                " sorted, int8"
            ),
            (
                f"{speeds} (a learner's run of the command line measured"
                f" {c['issue_50_avx2_pieces_per_sec']} on an AVX2 EPYC, batch 64, input"
                " order)"
            ),
            "int8 ≥ 2,000",
        ],
        [
            (
                "BLEU of the same: fp32 sorted / int8; int8 − fp32 (95%"
                " paired-bootstrap interval)"
            ),
            (
                f"{c['sorted']['sacrebleu']:.2f} /"
                f" {c['sorted, int8']['sacrebleu']:.2f}; **{d['bleu']:+.2f}**"
                f" ({d['low']:+.2f} to {d['high']:+.2f})"
            ),
            "≥ −0.5",
        ],
    ]


def shallow_rows(c) -> list:
    if not c or not c["measured"]:
        return []
    deep, shallow = c["models"][c["deep"]], c["models"][c["shallow"]]
    speed = lambda m: f"{statistics.median(m['pieces_per_sec_rounds']):,.0f}"
    return [
        [
            (
                f"a shallow decoder, the same way ({c['lines']:,} lines, sorted, fp32):"
                f" the speedrun's quick records {deep['record']} ({c['deep']}) and"
                f" {shallow['record']} ({c['shallow']}), source pieces/s, median of"
                f" {len(c['ratio_rounds'])} rounds; their beam-4 test BLEU (the gain's"
                " interval is on the speedrun page)"
            ),
            (
                f"**{statistics.median(c['ratio_rounds']):.2f}×** (rounds"
                f" {min(c['ratio_rounds']):.2f}–{max(c['ratio_rounds']):.2f}×;"
                f" {speed(deep)} → {speed(shallow)}); BLEU {deep['beam4_test']:.2f} →"
                f" {shallow['beam4_test']:.2f}"
            ),
            "",
        ]
    ]


def summary_rows(rec: dict) -> list:
    """The figures the book's benchmark table shows (tools/render_tables.py renders it),
    with their targets."""
    t, d, b16 = (
        rec["training"],
        rec["decoding"],
        rec["training"].get("bf16", {"measured": False}),
    )
    percent = lambda x: f"{100 * x:.1f}%"
    rounds = lambda other: "single rounds {:.2f}–{:.2f}×".format(
        *(
            f(
                a / b
                for a, b in zip(
                    t["course"]["tokens_per_sec_rounds"],
                    t[other]["tokens_per_sec_rounds"],
                )
            )
            for f in (min, max)
        )
    )
    speed = lambda k: f"{t[k]['tokens_per_sec_median']:,.0f}"
    rows = [
        [
            "training speed, course / d2l-style baseline",
            (
                f"**{t['ratio_train_vs_d2l']:.2f}×** ({speed('course')} "
                f"vs {speed('d2l')} target tokens/s; {rounds('d2l')})"
            ),
            "≥ 3.5×",
        ],
        [
            "training speed, course / `torch.nn.Transformer`, identical batches",
            (
                f"**{t['ratio_train_vs_nn_transformer']:.2f}×** ({speed('torch')}"
                f" tokens/s for `nn.Transformer`; {rounds('torch')})"
            ),
            "≥ 1.1×",
        ],
        [
            (
                "model FLOP utilisation (6 × non-embedding parameters × tokens/s ÷ the"
                f" matmul peak measured in the same run, {t['peak_matmul_gflops']:.0f}"
                " GFLOP/s)"
            ),
            (
                f"**{percent(t['course']['mfu'])}** (d2l-style"
                f" {percent(t['d2l']['mfu'])}, `nn.Transformer`"
                f" {percent(t['torch']['mfu'])})"
            ),
            "≥ 40%",
        ],
        [
            "target positions that are padding: length-bucketed, d2l's `num_steps=20`",
            (
                f"{percent(t['padding']['course_bucketed'])},"
                f" {percent(t['padding']['d2l_num_steps_20'])}"
            ),
            "",
        ],
    ]
    if b16["measured"]:
        rows += [
            [
                "bf16 (autocast), course bf16 / course fp32",
                (
                    f"**{b16['ratio_course_bf16_vs_fp32']:.2f}×** "
                    f"(bf16 matmul peak {b16['peak_matmul_gflops']:.0f} GFLOP/s)"
                ),
                "",
            ],
            [
                "bf16: course bf16 / d2l-style (fp32)",
                f"**{b16['ratio_course_bf16_vs_d2l']:.2f}×**",
                "≥ 7×",
            ],
            [
                "bf16: course / `nn.Transformer`, both bf16",
                f"**{b16['ratio_course_vs_nn_transformer_bf16']:.2f}×**",
                "≥ 1.2×",
            ],
            [
                "bf16: MFU of the bf16 peak",
                f"**{percent(b16['mfu_course_bf16'])}**",
                "≥ 40%",
            ],
        ]
    minutes = rec["bench_seconds"] / 60
    return rows + [
        [
            (
                f"decoding {d['sentences']} held-out sentences, sentences/s: batched"
                " greedy with KV cache / beam 4 / one at a time without cache"
            ),
            " / ".join(
                f"{d[k]['sentences_per_sec_median']:,.1f}"
                for k in ("batched_greedy", "beam4", "one_at_a_time")
            ),
            "",
        ],
        [
            "decoding, batched greedy / one at a time",
            f"**{d['ratio_decode_batched_vs_one_at_a_time']:.1f}×**",
            "≥ 30×",
        ],
        [
            (
                "the same, against one at a time with the output layer on the newest"
                " position only"
            ),
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
        *cpu_rows(rec.get("cpu_translation")),
        *shallow_rows(rec.get("shallow_decoder")),
        [
            "run",
            (
                f"{minutes:.1f} min: {t['rounds']} rounds × {t['batches_per_round']}"
                f" batches per contender, {rec['threads']} threads; decoding with"
                f" {d['model']}, torch {torch.__version__}"
            ),
            "",
        ],
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5, help="training rounds (5)")
    parser.add_argument(
        "--steps", type=int, default=16, help="batches per contender per round (16)"
    )
    parser.add_argument(
        "--decode-sentences",
        type=int,
        default=500,
        help="held-out sentences to decode (500)",
    )
    parser.add_argument(
        "--decode-rounds", type=int, default=5, help="decoding rounds (5)"
    )
    parser.add_argument(
        "--checkpoint",
        help=(
            "model for the decoding benchmark (default: the course's published "
            "model, models/tatoeba-en-fr)"
        ),
    )
    parser.add_argument(
        "--fallback-steps",
        type=int,
        default=600,
        help="updates to train when there is no checkpoint",
    )
    parser.add_argument(
        "--bf16",
        action="store_true",
        help=(
            "add the bf16 contenders even where this CPU only "
            "emulates bf16 (slow; for checking the code path)"
        ),
    )
    parser.add_argument(
        "--skip-nbval", action="store_true", help="do not time the quick-mode nbval run"
    )
    parser.add_argument(
        "--cpu-lines",
        type=int,
        help="Tatoeba test lines for the one-core translation speed (all)",
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
    train = bench_training(args, report)
    decode = bench_decoding(args, report)
    cpu = bench_cpu_translation(args, report)
    shallow = bench_shallow_decoder(args, report)
    notebooks = notebook_wall_times()
    nbval = None if args.skip_nbval else nbval_quick_wall()
    result = {
        "ratio_train_vs_d2l": train["ratio_train_vs_d2l"],
        "ratio_train_vs_nn_transformer": train["ratio_train_vs_nn_transformer"],
        "ratio_decode_batched_vs_one_at_a_time": decode[
            "ratio_decode_batched_vs_one_at_a_time"
        ],
        "mfu_course": train["course"]["mfu"],
        "training": train,
        "decoding": decode,
        "cpu_translation": cpu,
        "shallow_decoder": shallow,
        "notebook_wall_s_learner_mode": notebooks,
        "nbval_quick_wall_s": nbval,
        "threads": torch.get_num_threads(),
        "dtype": "float32",
        "bench_seconds": time.perf_counter() - started,
        "command": " ".join(
            ["python", "bench/bench.py", *(argv if argv is not None else sys.argv[1:])]
        ),
    }
    result["tables"] = [
        {"columns": ["figure", "measured", "target"], "rows": summary_rows(result)}
    ]
    # stamped with the date, the CPU and torch's version
    out = write_record(args.out, result)

    t = train
    print(
        f"\nTraining, target tokens/s (median of {t['rounds']} rounds x"
        f" {t['batches_per_round']} batches of {BATCH} sentences; matmul peak"
        f" {t['peak_matmul_gflops']:.0f} GFLOP/s):"
    )
    print(f"{'contender':<12}{'tok/s':>10}{'MFU':>8}{'non-emb params':>16}")
    # MFU: fp32 peak
    for name in [
        n for n in ("course", "d2l", "torch", "course_bf16", "torch_bf16") if n in t
    ]:
        c = t[name]
        print(
            f"{name:<12}{c['tokens_per_sec_median']:>10,.0f}{c['mfu']:>8.1%}{c['non_embedding_parameters']:>16,}"
        )
    print(
        f"padding: course bucketed {t['padding']['course_bucketed']:.1%}, d2l"
        f" num_steps=20 {t['padding']['d2l_num_steps_20']:.1%}"
    )
    print(
        f"ratio course / d2l-style:        {t['ratio_train_vs_d2l']:.2f}x (target >="
        " 3.5)"
    )
    print(
        f"ratio course / nn.Transformer:   {t['ratio_train_vs_nn_transformer']:.2f}x"
        " (target >= 1.0)"
    )
    print(f"MFU course:                      {t['course']['mfu']:.1%} (target >= 40%)")
    b16 = t["bf16"]
    if not b16["measured"]:
        print(f"bf16: not measured; {b16['reason']}")
    else:
        print(
            f"bf16 (matmul peak {b16['peak_matmul_gflops']:.0f} GFLOP/s): course bf16 /"
            f" fp32 {b16['ratio_course_bf16_vs_fp32']:.2f}x; course bf16 / d2l-style"
            f" (fp32) {b16['ratio_course_bf16_vs_d2l']:.2f}x (target >= 7); course /"
            " nn.Transformer, both bf16"
            f" {b16['ratio_course_vs_nn_transformer_bf16']:.2f}x (target >= 1.2); MFU"
            f" of the bf16 peak {b16['mfu_course_bf16']:.1%} (target >= 40%)"
        )
    d = decode
    print(
        f"\nDecoding {d['sentences']} held-out sentences ({d['model']}), sentences/s:"
    )
    for k in (
        "batched_greedy",
        "beam4",
        "one_at_a_time",
        "one_at_a_time_last_position",
    ):
        print(f"  {k:<30}{d[k]['sentences_per_sec_median']:>10,.1f}")
    print(
        "ratio batched greedy / one at a time:"
        f" {d['ratio_decode_batched_vs_one_at_a_time']:.1f}x (target >= 30)"
    )
    print(
        "ratio batched greedy / one at a time, output layer on the newest position"
        f" only: {d['ratio_decode_batched_vs_one_at_a_time_last_position']:.1f}x"
        " (context)"
    )
    print(
        "peak memory of `python -m nmt_lib translate` over the same sentences: "
        + ", ".join(f"{k} {v:,.0f} MB" for k, v in d["peak_memory_mb"].items())
    )
    print(
        "\nNotebook wall times, learner mode (from the committed notebooks' cell"
        f" timings; target <= {CHAPTER_TARGET_S} s each):"
    )
    for name, secs in notebooks.items():
        print(
            f"  {name:<24}{secs:>8.0f} s"
            + ("   over the target" if secs > CHAPTER_TARGET_S else "")
        )
    if nbval is not None:
        print(f"nbval, quick mode, all notebooks: {nbval:.0f} s")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
