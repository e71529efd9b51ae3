"""Training speed: the course's Transformer against a d2l-style baseline and
torch.nn.Transformer, trained alternately on the same sentences (book/benchmarks.md).
All at d_model 256, 3 + 3 layers, 8 heads, d_ff 1024, dropout 0.1, batches of 128
sentences from the first 50,000 training pairs:
  course   as `python -m nmt_lib train` trains it: chapter 10's switches on,
           length-bucketed batches, fused Adam, chapter 9's `apply_update`;
  d2l      the book's blocks, every batch padded to num_steps=20, and the loss, loop
           and optimizer (torch.optim.Adam) of d2l's train_seq2seq;
  torch    torch.nn.Transformer, fed the course's batches, loss and optimizer.
Where the CPU computes bf16 natively, course and torch train again under bf16 autocast.
Shapes: B batch, S source length, T target length, D d_model.
"""

import copy
import math
import statistics
import time
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from nmt_lib.base.device import autocast_dtype
from nmt_lib.data import NMTData, collate
from nmt_lib.fast import fused_paper_adam, sliced_batch_loss, use_fast_dropout
from nmt_lib.model_helpers import num_parameters
from nmt_lib.positional import PositionalEncoding
from nmt_lib.text import load_fra_eng, split_pairs
from nmt_lib.training import TrainSettings, apply_update, noam_schedule
from nmt_lib.transformer import Transformer, TransformerConfig

D_MODEL, HEADS, D_FF, LAYERS, DROPOUT = 256, 8, 1024, 3, 0.1
BATCH, PAIRS, NUM_STEPS, LR = 128, 50_000, 20, 1e-4
SETTINGS = TrainSettings(label_smoothing=0.0, clip=1.0, warmup=4000)


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


def build_d2l(src_vocab, tgt_vocab, sample) -> D2LTransformer:
    model = D2LTransformer(src_vocab, tgt_vocab)
    with torch.no_grad():  # materialise the lazy layers, then initialise them
        model(sample.src[:2], sample.src_len[:2], sample.tgt_in[:2])
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
    return model


def d2l_masked_loss(pred, label, valid_len):
    """train_seq2seq's MaskedSoftmaxCELoss: per-token CE, zero on padding, mean over
    num_steps."""
    weights = (torch.arange(label.shape[1])[None, :] < valid_len[:, None]).float()
    unweighted = F.cross_entropy(pred.permute(0, 2, 1), label, reduction="none")
    return (unweighted * weights).mean(dim=1)


# torch.nn.Transformer, offering what chapter 10's `sliced_batch_loss` reads of the
# course's model: `encode(src, src_len)`, `decoder.features(tgt_in, state)` and
# `decoder.dense`. nn.Transformer's forward is its encoder, then its decoder.
class TorchDecoder(nn.Module):
    def __init__(self, layers: nn.TransformerDecoder, tgt_vocab: int, pad_id: int):
        super().__init__()
        self.embedding, self.layers = nn.Embedding(tgt_vocab, D_MODEL), layers
        self.pos = PositionalEncoding(D_MODEL, DROPOUT, max_len=512)
        self.dense, self.pad_id = nn.Linear(D_MODEL, tgt_vocab), pad_id

    def features(self, tgt_in, state):
        """The decoder's output (B, T, D) before the output layer, and the state."""
        memory, src_pad = state
        T = tgt_in.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)  # True: hidden
        y = self.pos(self.embedding(tgt_in) * math.sqrt(D_MODEL))
        hidden = self.layers(
            y,
            memory,
            tgt_mask=causal,
            tgt_key_padding_mask=tgt_in == self.pad_id,
            memory_key_padding_mask=src_pad,
            tgt_is_causal=True,
        )
        return hidden, state


class TorchTransformer(nn.Module):
    def __init__(self, src_vocab: int, tgt_vocab: int, pad_id: int = 0):
        super().__init__()
        core = nn.Transformer(
            D_MODEL, HEADS, LAYERS, LAYERS, D_FF, DROPOUT, batch_first=True
        )
        self.embedding, self.encoder = nn.Embedding(src_vocab, D_MODEL), core.encoder
        self.pos = PositionalEncoding(D_MODEL, DROPOUT, max_len=512)
        self.decoder = TorchDecoder(core.decoder, tgt_vocab, pad_id)

    def encode(self, src, src_len):
        """The encoder's output (B, S, D) and the source padding (B, S), True: pad."""
        src_pad = torch.arange(src.shape[1])[None, :] >= src_len[:, None]
        x = self.pos(self.embedding(src) * math.sqrt(D_MODEL))
        return self.encoder(x, src_key_padding_mask=src_pad), src_pad


def non_embedding_parameters(model) -> int:
    """The course's parameter count, less the embedding tables (the 6N of MFU)."""
    tables = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    return num_parameters(model) - sum(map(num_parameters, tables))


class Contender:
    """A model, its optimizer and update; `rates`: target tokens/s of each round."""

    def __init__(self, name, model, step, optimizer=None, dtype=None):
        self.name, self.model, self.step = name, model, step
        self.optimizer = optimizer or fused_paper_adam(model.parameters(), LR)
        self.dtype = dtype  # autocast dtype of the forward pass; None: fp32
        self.schedule = noam_schedule(
            self.optimizer, d_model=D_MODEL, warmup=SETTINGS.warmup
        )
        self.rates = []

    def run(self, batches) -> float:
        """Train on `batches` (lists of sentence indices); keep and return the rate."""
        self.model.train()
        start = time.perf_counter()
        tokens = sum(self.step(self, items) for items in batches)
        self.rates.append(tokens / (time.perf_counter() - start))
        return self.rates[-1]


def course_step(pad, dataset, c, items) -> int:
    """One update as the trainer makes it: the sliced loss under autocast, then
    `apply_update`."""
    b = collate([dataset[i] for i in items], **pad)
    with torch.autocast("cpu", dtype=c.dtype, enabled=c.dtype is not None):
        loss, n = sliced_batch_loss(c.model, b, SETTINGS, pad["pad_id"])
    loss.backward()
    apply_update(list(c.model.parameters()), c.optimizer, c.schedule, n, SETTINGS.clip)
    return n


def d2l_step(pad, dataset, c, items) -> int:
    """One update of d2l's train_seq2seq, on the batch padded to num_steps."""
    import d2l.torch as d2l

    b = collate([dataset[i] for i in items], **pad, num_steps=NUM_STEPS)
    loss = d2l_masked_loss(c.model(b.src, b.src_len, b.tgt_in), b.tgt_out, b.tgt_len)
    c.optimizer.zero_grad(set_to_none=True)
    loss.sum().backward()
    d2l.grad_clipping(c.model, 1)
    c.optimizer.step()
    return int(b.tgt_len.sum())


def matmul_peak(n=1024, repeats=20, dtype=torch.float32) -> float:
    """Best GFLOP/s of an n x n matrix product in `dtype`, over `repeats` products."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e9


def median_ratio(a, b) -> float:
    return statistics.median(x / y for x, y in zip(a, b))


def round_batches(batches, dataset, rounds: int, steps: int) -> list:
    """`rounds` disjoint lists of `steps` batches, each with the epoch's length mix
    (the d2l-style model's time per batch is fixed, the course's follows the length):
    batches sorted by length, taken at even spacing, dealt out like cards forwards then
    backwards."""
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


def contenders(data, dataset, batches, pad, bf16: bool) -> list[Contender]:
    """course, d2l, torch, then (where bf16 is measured) copies of course and torch."""
    V_src, V_tgt = len(data.src_vocab), len(data.tgt_vocab)
    course_step_ = partial(course_step, pad, dataset)
    torch.manual_seed(0)
    size = dict(d_model=D_MODEL, n_heads=HEADS, d_ff=D_FF, n_layers=LAYERS)
    course = Transformer(TransformerConfig(V_src, V_tgt, **size, dropout=DROPOUT))
    use_fast_dropout(course)
    sample = collate([dataset[i] for i in batches[0]], **pad, num_steps=NUM_STEPS)
    d2l_model = build_d2l(V_src, V_tgt, sample)
    torch_model = TorchTransformer(V_src, V_tgt, pad["pad_id"])
    out = [
        Contender("course", course, course_step_),
        # as train_seq2seq does: plain Adam
        Contender(
            "d2l",
            d2l_model,
            partial(d2l_step, pad, dataset),
            torch.optim.Adam(d2l_model.parameters(), lr=LR),
        ),
        Contender("torch", torch_model, course_step_),
    ]
    low = autocast_dtype("bf16" if bf16 else "auto", "cpu")
    if low is not None:  # the same weights, computing in bf16 (d2l's way stays fp32)
        out += [
            Contender(f"{c.name}_bf16", copy.deepcopy(c.model), course_step_, dtype=low)
            for c in (out[0], out[2])
        ]
    return out


def bench_training(args, report) -> dict:
    pairs = split_pairs(load_fra_eng()).train[:PAIRS]
    data = NMTData(pairs, valid_frac=0.0, test_frac=0.0, min_freq=2)
    loader = data.loader("train", batch_size=BATCH, seed=0)
    dataset, batches = loader.dataset, list(loader.batch_sampler)
    vocab = data.tgt_vocab
    pad = dict(pad_id=vocab.pad_id, bos_id=vocab.bos_id, eos_id=vocab.eos_id)
    racers = contenders(data, dataset, batches, pad, args.bf16)
    rounds = round_batches(batches, dataset, args.rounds, args.steps)
    for c in racers:  # warm-up, untimed
        c.run(batches[:2])
        c.rates.clear()
    peak = matmul_peak()
    for r, chunk in enumerate(rounds):
        for c in racers if r % 2 == 0 else racers[::-1]:  # alternate who goes first
            c.run(chunk)
        report(
            f"round {r + 1}/{args.rounds}: "
            + ", ".join(f"{c.name} {c.rates[-1]:,.0f}" for c in racers)
            + " target tok/s"
        )
    peak = max(peak, matmul_peak())

    bucketed = [collate([dataset[i] for i in b], **pad) for b in batches]
    real = sum(int(b.tgt_len.sum()) for b in bucketed)
    d2l_real = sum(min(len(t) + 1, NUM_STEPS) for t in dataset.tgt)
    out = {
        "peak_matmul_gflops": peak,
        "padding": {
            "course_bucketed": 1 - real / sum(b.tgt_out.numel() for b in bucketed),
            "d2l_num_steps_20": 1 - d2l_real / (len(pairs) * NUM_STEPS),
        },
        "batches_per_round": args.steps,
        "rounds": args.rounds,
        "sentences_per_batch": BATCH,
        "training_pairs": len(pairs),
    }
    for c in racers:
        rate, params = statistics.median(c.rates), non_embedding_parameters(c.model)
        out[c.name] = {
            "tokens_per_sec_median": rate,
            "tokens_per_sec_rounds": c.rates,
            "non_embedding_parameters": params,
            "mfu": 6 * params * rate / (peak * 1e9),
        }
    rates = {c.name: c.rates for c in racers}
    out["ratio_train_vs_d2l"] = median_ratio(rates["course"], rates["d2l"])
    out["ratio_train_vs_nn_transformer"] = median_ratio(rates["course"], rates["torch"])
    if "course_bf16" not in rates:
        out["bf16"] = {
            "measured": False,
            "reason": (
                "this CPU has no native bf16 (AVX-512 BF16 or AMX): PyTorch would"
                " emulate it, far slower than fp32, so precision=auto trains in fp32"
                " and the fp32 targets apply"
            ),
        }
        return out
    peak16 = max(matmul_peak(dtype=torch.bfloat16) for _ in range(2))
    c16 = rates["course_bf16"]
    out["bf16"] = {
        "measured": True,
        "peak_matmul_gflops": peak16,
        "ratio_course_bf16_vs_fp32": median_ratio(c16, rates["course"]),
        "ratio_course_bf16_vs_d2l": median_ratio(c16, rates["d2l"]),
        "ratio_course_vs_nn_transformer_bf16": median_ratio(c16, rates["torch_bf16"]),
        "mfu_course_bf16": out["course_bf16"]["mfu"] * peak / peak16,
    }
    return out


def training_rows(t: dict) -> list:
    """The training figures of the book's benchmark table, with their targets."""
    percent = lambda x: f"{100 * x:.1f}%"
    speed = lambda k: f"{t[k]['tokens_per_sec_median']:,.0f}"

    def rounds(other):
        pairs = zip(
            t["course"]["tokens_per_sec_rounds"], t[other]["tokens_per_sec_rounds"]
        )
        ratios = [a / b for a, b in pairs]
        return f"single rounds {min(ratios):.2f}–{max(ratios):.2f}×"

    rows = [
        [
            "training speed, course / d2l-style baseline",
            f"**{t['ratio_train_vs_d2l']:.2f}×** ({speed('course')} vs {speed('d2l')}"
            f" target tokens/s; {rounds('d2l')})",
            "≥ 3.5×",
        ],
        [
            "training speed, course / `torch.nn.Transformer`, identical batches",
            f"**{t['ratio_train_vs_nn_transformer']:.2f}×** ({speed('torch')} tokens/s"
            f" for `nn.Transformer`; {rounds('torch')})",
            "≥ 1.1×",
        ],
        [
            "model FLOP utilisation (6 × non-embedding parameters × tokens/s ÷ the"
            f" matmul peak measured in the same run, {t['peak_matmul_gflops']:.0f}"
            " GFLOP/s)",
            f"**{percent(t['course']['mfu'])}** (d2l-style {percent(t['d2l']['mfu'])},"
            f" `nn.Transformer` {percent(t['torch']['mfu'])})",
            "≥ 40%",
        ],
        [
            "target positions that are padding: length-bucketed, d2l's `num_steps=20`",
            f"{percent(t['padding']['course_bucketed'])},"
            f" {percent(t['padding']['d2l_num_steps_20'])}",
            "",
        ],
    ]
    b16 = t["bf16"]
    if not b16["measured"]:
        return rows
    return rows + [
        [
            "bf16 (autocast), course bf16 / course fp32",
            f"**{b16['ratio_course_bf16_vs_fp32']:.2f}×** (bf16 matmul peak"
            f" {b16['peak_matmul_gflops']:.0f} GFLOP/s)",
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
