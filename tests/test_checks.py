"""The exercises' graders (nmt_lib.checks) pass right implementations, and for typical
wrong ones say in one sentence which case failed and, for a usual mistake, why. Chapter
12's graders are tested in test_modern.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nmt_lib.attention import attend, causal_mask, masked_softmax
from nmt_lib.checks import GRADERS, CheckFailed, check_attention
from nmt_lib.checks import check_attention_entropy, check_beam_step
from nmt_lib.checks import check_brevity_penalty, check_decoder_block, check_encode_word
from nmt_lib.checks import check_kv_cache_step, check_masked_cross_entropy
from nmt_lib.checks import check_masked_softmax, check_multihead, check_nadaraya_watson
from nmt_lib.checks import check_sinusoidal_table, check_sliced_loss
from nmt_lib.checks import check_smoothed_loss, check_split_merge, check_top_p
from nmt_lib.checks import check_truncate_pad, compare
from nmt_lib.data import truncate_pad
from nmt_lib.decoding import beam_step
from nmt_lib.multihead import MultiHeadAttention, merge_heads, split_heads
from nmt_lib.positional import sinusoidal_table
from nmt_lib.seq2seq import masked_cross_entropy
from nmt_lib.subword import BPE
from nmt_lib.transformer import PositionWiseFFN


def one_line(fn, *args):
    with pytest.raises(CheckFailed) as e:
        fn(*args)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_compare_names_the_shape_or_the_first_wrong_position():
    compare("x", torch.ones(2, 3), torch.ones(2, 3))
    assert "wrong shape (3, 2), expected (2, 3)" in one_line(
        compare, "x", torch.ones(3, 2), torch.ones(2, 3)
    )
    got = torch.zeros(2, 3)
    got[1, 2] = float("nan")
    assert "at position (1, 2): got nan, expected 0" in one_line(
        compare, "x", got, torch.zeros(2, 3)
    )
    assert "wrong value: got 2, expected 1" in one_line(compare, "x", 2.0, 1.0)
    assert "x: return a tensor (or numbers), got str" in one_line(
        compare, "x", "two", 1.0
    )


def test_a_function_that_forgets_to_return_is_told_so_by_every_grader():
    # these take a class, runs or a table
    skip = "multihead decoder_block local_attention beats_reference runs ablation"
    for name, grader in GRADERS.items():
        if name.removeprefix("check_") in skip.split():
            continue
        args = (lambda *a, **k: None,) * (
            2 if name in ("check_split_merge", "check_penalised_greedy") else 1
        )
        message = one_line(grader, *args)
        assert "got NoneType" in message or "return (" in message, (name, message)


def test_an_exception_in_a_learners_code_is_the_case_that_raised_it_and_its_line():
    def crashes(ids, num_steps, pad_id):
        return ids[num_steps + 10]  # IndexError on every case

    message = one_line(check_truncate_pad, crashes)
    assert message.startswith(
        "truncate_pad([5, 6, 7], 5, pad_id=0): your code raised IndexError"
    )
    assert message.endswith(
        "(your line: return ids[num_steps + 10]  # IndexError on every case)"
    )


def test_check_truncate_pad():
    assert "right" in check_truncate_pad(truncate_pad)
    in_front = lambda ids, n, pad: [pad] * (n - len(ids)) + ids[:n]
    assert "([5, 6, 7], 5, pad_id=0): the padding goes at the end" in one_line(
        check_truncate_pad, in_front
    )
    keeps_the_end = lambda ids, n, pad: (
        ids[-n:] + [pad] * (n - len(ids)) if ids else [pad] * n
    )
    assert "pad_id=0): cut the end off" in one_line(check_truncate_pad, keeps_the_end)
    assert "wrong shape (6,), expected (4,)" in one_line(
        check_truncate_pad, lambda ids, n, pad: ids + [pad] * (n - len(ids))
    )
    assert "return a list of ids, got NoneType" in one_line(
        check_truncate_pad, lambda ids, n, pad: None
    )


def nw(q, k, v, width, *, dim=1):
    return torch.softmax(-(((q[:, None] - k[None, :]) / width) ** 2) / 2, dim=dim) @ v


def test_check_nadaraya_watson():
    assert "right" in check_nadaraya_watson(nw)
    times = lambda q, k, v, width: nw(q, k, v, 1 / width)
    assert "width 0.3: divide the distance by the width" in one_line(
        check_nadaraya_watson, times
    )
    over_queries = lambda q, k, v, w: (
        torch.softmax(-(((q[:, None] - k[None, :]) / w) ** 2) / 2, dim=0) * v
    ).sum(1)
    assert "over the keys, not over the queries" in one_line(
        check_nadaraya_watson, over_queries
    )
    no_minus = lambda q, k, v, w: (
        torch.softmax(((q[:, None] - k[None, :]) / w) ** 2 / 2, dim=1) @ v
    )
    assert "without the minus sign" in one_line(check_nadaraya_watson, no_minus)
    unnormalised = lambda q, k, v, w: (
        torch.exp(-(((q[:, None] - k[None, :]) / w) ** 2) / 2) @ v
    )
    assert "width 0.3: wrong value at position (0,)" in one_line(
        check_nadaraya_watson, unnormalised
    )


def test_check_masked_softmax_takes_any_mask_shape():
    right = lambda scores, mask: masked_softmax(scores, mask=mask)
    assert "right in all 5 cases" in check_masked_softmax(right)
    over_queries = lambda s, m: torch.softmax(s.masked_fill(~m, -1e9), dim=-2) * m
    assert "(B, 1, Tk): the weights sum to 1 over the keys" in one_line(
        check_masked_softmax, over_queries
    )
    assert "True means may attend" in one_line(
        check_masked_softmax, lambda s, m: right(s, ~m)
    )
    assert "a masked score of 0 still gets weight" in one_line(
        check_masked_softmax, lambda s, m: torch.softmax(s * m, dim=-1)
    )
    assert "mask the scores before it" in one_line(
        check_masked_softmax, lambda s, m: torch.softmax(s, -1) * m
    )
    assert "the mask was not applied" in one_line(
        check_masked_softmax, lambda s, m: torch.softmax(s, -1)
    )
    minus_inf = lambda s, m: torch.softmax(s.masked_fill(~m, float("-inf")), dim=-1)
    assert "a batch row with no allowed key: NaN" in one_line(
        check_masked_softmax, minus_inf
    )
    no_zeros = lambda s, m: torch.softmax(
        s.masked_fill(~m, torch.finfo(s.dtype).min), dim=-1
    )
    assert (
        "a batch row with no allowed key: a row with no allowed key must be all zeros,"
        " not uniform" in one_line(check_masked_softmax, no_zeros)
    )

    def lengths_only(scores, mask):  # (B, 1, Tk) masks only
        return masked_softmax(scores, mask=mask.view(scores.shape[0], 1, -1))

    assert "a causal mask of shape (Tq, Tk): your code raised RuntimeError" in one_line(
        check_masked_softmax, lengths_only
    )


def test_check_attention():
    assert "right" in check_attention(
        lambda q, k, v, mask: attend(q, k, v, mask, need_weights=True)
    )

    def attention(q, k, v, mask, scale=None, dim=-1):
        scores = q @ k.transpose(-2, -1) / (scale or math.sqrt(q.shape[-1]))
        if mask is not None:
            scores = scores.masked_fill(~mask, -1e9)
        w = torch.softmax(scores, dim=dim)
        return w @ v, w

    assert "right" in check_attention(attention)
    assert (
        "no mask, 3 queries over 5 keys of width 16: the weights: divide the scores by"
        " sqrt(d)"
        in one_line(
            check_attention, lambda q, k, v, m: attention(q, k, v, m, scale=1.0)
        )
    )
    assert "not by d" in one_line(
        check_attention, lambda q, k, v, m: attention(q, k, v, m, scale=q.shape[-1])
    )
    assert "over the keys" in one_line(
        check_attention, lambda q, k, v, m: attention(q, k, v, m, dim=-2)
    )
    assert "return (output, weights), got Tensor" in one_line(
        check_attention, lambda q, k, v, m: attention(q, k, v, m)[0]
    )
    ignores_the_mask = lambda q, k, v, m: attention(q, k, v, None)
    assert "a padding mask of shape (B, 1, Tk): the weights: wrong value" in one_line(
        check_attention, ignores_the_mask
    )


def test_check_brevity_penalty():
    bp = lambda c, r: 1.0 if c >= r else math.exp(1 - r / c)
    assert "right" in check_brevity_penalty(bp)
    assert (
        "12-token output against a 10-token reference: an output at least as long"
        in one_line(check_brevity_penalty, lambda c, r: math.exp(1 - r / c))
    )
    assert "reference over output" in one_line(
        check_brevity_penalty, lambda c, r: 1.0 if c >= r else math.exp(1 - c / r)
    )
    assert "not the ratio" in one_line(
        check_brevity_penalty, lambda c, r: min(1.0, c / r)
    )


def test_check_masked_cross_entropy():
    assert "right" in check_masked_cross_entropy(masked_cross_entropy)
    over_all = lambda x, t, pad: (
        F.cross_entropy(x.flatten(0, 1), t.flatten()),
        t.numel(),
    )
    assert "padding: the loss: average over the real tokens only" in one_line(
        check_masked_cross_entropy, over_all
    )
    # ignores the pad id given
    pad0 = lambda logits, tgt, pad: masked_cross_entropy(logits, tgt, 0)
    assert "pad_id 1: the loss: padding is the token pad_id, not always 0" in one_line(
        check_masked_cross_entropy, pad0
    )

    def summed(logits, tgt, pad):
        loss, n = masked_cross_entropy(logits, tgt, pad)
        return loss * n, n

    assert "no padding: the loss: return the mean" in one_line(
        check_masked_cross_entropy, summed
    )
    every = lambda x, tgt, pad: (masked_cross_entropy(x, tgt, pad)[0], tgt.numel())
    assert "padding: the number of real tokens: count the real tokens only" in one_line(
        check_masked_cross_entropy, every
    )
    assert "return (loss, n_tokens)" in one_line(
        check_masked_cross_entropy, lambda x, t, p: masked_cross_entropy(x, t, p)[0]
    )


def test_check_split_merge():
    assert "right" in check_split_merge(split_heads, merge_heads)
    plain = lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1)
    assert (
        "split(x, 4) for x of shape (2, 3, 8): split with view(B, T, H,"
        " Dh).transpose(1, 2)" in one_line(check_split_merge, plain, merge_heads)
    )
    no_transpose = lambda y: y.reshape(y.shape[0], y.shape[2], -1)
    assert "merge(split(x, 4)): transpose back" in one_line(
        check_split_merge, split_heads, no_transpose
    )
    unmoved = lambda x, h: x.view(x.shape[0], x.shape[1], h, -1)
    assert "wrong shape" in one_line(check_split_merge, unmoved, merge_heads)


class MyAttention(nn.Module):
    """A learner's multi-head attention, with switches for the usual mistakes."""

    def __init__(
        self,
        d_model,
        n_heads,
        *,
        scale_by_width=False,
        reshape=False,
        no_out=False,
        detach=False,
        names=("W_q", "W_k", "W_v", "W_o"),
    ):
        super().__init__()
        self.h, self.names = n_heads, names
        for name in names:
            setattr(self, name, nn.Linear(d_model, d_model))
        self.scale_by_width, self.reshape, self.no_out, self.detach = (
            scale_by_width,
            reshape,
            no_out,
            detach,
        )

    def forward(self, queries, keys, values, mask=None):
        W_q, W_k, W_v, W_o = (getattr(self, n) for n in self.names)
        B, D = queries.shape[0], queries.shape[-1]
        if self.reshape:
            heads = lambda x: x.reshape(B, self.h, x.shape[1], D // self.h)
        else:
            heads = lambda x: x.view(B, x.shape[1], self.h, D // self.h).transpose(1, 2)
        q, k, v = heads(W_q(queries)), heads(W_k(keys)), heads(W_v(values))
        scores = (
            q
            @ k.transpose(-2, -1)
            / math.sqrt(D if self.scale_by_width else D // self.h)
        )
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, queries.shape[1], D)
        out = out if self.no_out else W_o(out)
        return out.detach() if self.detach else out


def test_check_multihead_loads_the_course_weights_and_names_the_mistake():
    assert "right in all 3 cases" in check_multihead(MultiHeadAttention)
    assert "right in all 3 cases" in check_multihead(MyAttention)
    mistake = lambda **kw: lambda d, h: MyAttention(d, h, **kw)
    assert (
        "self-attention over 5 tokens, no mask: the output: scale the scores by"
        " sqrt(Dh)" in one_line(check_multihead, mistake(scale_by_width=True))
    )
    assert "split with view(B, T, H, Dh)" in one_line(
        check_multihead, mistake(reshape=True)
    )
    assert "output projection W_o" in one_line(check_multihead, mistake(no_out=True))
    assert "your output has no gradient" in one_line(
        check_multihead, mistake(detach=True)
    )
    renamed = one_line(check_multihead, mistake(names=("q", "k", "v", "o")))
    assert renamed.startswith(
        "cls(16, 4): the course's weights do not fit yours: expected parameters"
        " W_k.bias"
    )
    assert (
        "yours lack W_k.bias, W_k.weight, W_o.bias" in renamed
        and "and have k.bias, k.weight, o.bias" in renamed
    )
    assert "building cls(16, 4): your code raised TypeError" in one_line(
        check_multihead, lambda d: None
    )


class MyBlock(nn.Module):
    def __init__(self, d, h, f, *, post_norm=False, causal=True, src_mask=True):
        super().__init__()
        self.self_attn, self.cross_attn = (MultiHeadAttention(d, h) for _ in range(2))
        self.ffn = PositionWiseFFN(d, f)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d) for _ in range(3))
        self.post_norm, self.causal, self.use_src_mask = post_norm, causal, src_mask

    def forward(self, x, memory, src_mask):
        mask = causal_mask(x.shape[1]) if self.causal else None
        src_mask = src_mask if self.use_src_mask else None
        sublayers = [
            (self.norm1, lambda y: self.self_attn(y, y, y, mask)),
            (self.norm2, lambda y: self.cross_attn(y, memory, memory, src_mask)),
            (self.norm3, self.ffn),
        ]
        for norm, f in sublayers:
            x = norm(x + f(x)) if self.post_norm else x + f(norm(x))
        return x


def test_check_decoder_block():
    assert "right in all 2 cases" in check_decoder_block(MyBlock)
    mistake = lambda **kw: lambda d, h, f: MyBlock(d, h, f, **kw)
    assert "no padding: earlier positions' outputs changed" in one_line(
        check_decoder_block, mistake(causal=False)
    )
    assert "no padding: the output: pre-norm is x + sublayer(norm(x))" in one_line(
        check_decoder_block, mistake(post_norm=True)
    )
    assert (
        "(lengths 6 and 2): the output: cross-attention must not read padded"
        in one_line(check_decoder_block, mistake(src_mask=False))
    )


def cache_step(attn, y, past_k, past_v, *, prepend=False, only_new=False):
    k, v = attn.project_kv(y, y)
    if past_k is not None and not only_new:
        k, v = (
            (torch.cat([k, past_k], 2), torch.cat([v, past_v], 2))
            if prepend
            else (torch.cat([past_k, k], 2), torch.cat([past_v, v], 2))
        )
    return attn.attend_kv(y, k, v), k, v


def test_check_kv_cache_step():
    assert "right in all 4 cases" in check_kv_cache_step(cache_step)
    assert "step 2 (1 cached positions): the keys: the new key goes after" in one_line(
        check_kv_cache_step, lambda *a: cache_step(*a, prepend=True)
    )
    assert "the keys: return the keys of all positions so far" in one_line(
        check_kv_cache_step, lambda *a: cache_step(*a, only_new=True)
    )

    def forgets_the_cache_in_attention(attn, y, past_k, past_v):
        out, k, v = cache_step(attn, y, past_k, past_v)
        return attn.attend_kv(y, *attn.project_kv(y, y)), k, v

    assert (
        "step 2 (1 cached positions): the output: the new position attends over the"
        " cached keys" in one_line(check_kv_cache_step, forgets_the_cache_in_attention)
    )


def test_check_beam_step():
    assert "right" in check_beam_step(beam_step)

    def no_stay(scores, logp, finished, eos_id):  # a finished beam pays for more tokens
        B, K, V = logp.shape
        top_scores, top = (scores.unsqueeze(-1) + logp).view(B, K * V).topk(K, dim=-1)
        return top_scores, top // V, top % V

    assert (
        "finished beams, scores: a finished beam can only continue with <eos>"
        in one_line(check_beam_step, no_stay)
    )

    # each beam keeps its own best token only
    def per_beam(scores, logp, finished, eos_id):
        best, token = (scores.unsqueeze(-1) + logp).max(-1)
        best, order = best.sort(-1, descending=True)
        return best, order, token.gather(1, order)

    assert (
        "the first step (one live beam), scores: choose the K best of all K x V"
        in one_line(check_beam_step, per_beam)
    )
    no_scores = lambda s, logp, f, eos: beam_step(torch.zeros_like(s), logp, f, eos)
    assert "add each beam's score" in one_line(check_beam_step, no_scores)


def test_check_sinusoidal_table():
    assert "right" in check_sinusoidal_table(sinusoidal_table)
    halves = lambda T, D: torch.cat(
        [sinusoidal_table(T, D)[:, 0::2], sinusoidal_table(T, D)[:, 1::2]], dim=1
    )
    assert (
        "max_len=5, d_model=4: sin in the even columns and cos in the odd ones,"
        " interleaved" in one_line(check_sinusoidal_table, halves)
    )
    swapped = lambda T, D: sinusoidal_table(T, D).view(T, D // 2, 2).flip(-1).flatten(1)
    assert "you swapped them" in one_line(check_sinusoidal_table, swapped)

    def own_frequency(T, D):
        angles = torch.arange(T)[:, None] * 10_000.0 ** (-torch.arange(D) / D)
        return torch.where(torch.arange(D) % 2 == 0, angles.sin(), angles.cos())

    assert "share one frequency" in one_line(check_sinusoidal_table, own_frequency)


def entropy(w):
    return -(w * torch.where(w > 0, w, 1.0).log()).sum(-1).mean(-1)


def test_check_attention_entropy():
    assert "right" in check_attention_entropy(entropy)
    assert "one-hot rows: NaN in your result: a weight of 0 adds 0" in one_line(
        check_attention_entropy, lambda w: -(w * w.log()).sum(-1).mean(-1)
    )
    assert "uniform rows over 4 keys: entropy in nats uses the natural log" in one_line(
        check_attention_entropy, lambda w: entropy(w) / math.log(2)
    )
    assert "the mean over query rows, not their sum" in one_line(
        check_attention_entropy, lambda w: entropy(w) * w.shape[-2]
    )
    assert "wrong shape (3,), expected ()" in one_line(
        check_attention_entropy,
        lambda w: -(w * torch.where(w > 0, w, 1.0).log()).sum(-1),
    )


def test_check_encode_word():
    assert "right in all 4 cases" in check_encode_word(
        lambda word, merges: BPE(merges).encode_word(word)
    )

    def leftmost(word, merges):
        pieces = list(word)
        while True:
            at = [i for i, p in enumerate(zip(pieces, pieces[1:])) if p in merges]
            if not at:
                return pieces
            pieces[at[0] : at[0] + 2] = [pieces[at[0]] + pieces[at[0] + 1]]

    assert (
        "low with the merges (o, w) then (l, o): apply the earliest-learned merge first"
        in one_line(check_encode_word, leftmost)
    )

    def one_pass(word, merges):
        pieces = list(word)
        for a, b in merges:
            for i in range(len(pieces) - 1):
                if (pieces[i], pieces[i + 1]) == (a, b):
                    pieces[i : i + 2] = [a + b]
                    break
        return pieces

    assert "aaaa with the merge (a, a): keep merging until" in one_line(
        check_encode_word, one_pass
    )
    assert "got ['▁low'], expected ['▁', 'l', 'ow']" in one_line(
        check_encode_word, lambda w, m: [w]
    )


def test_check_smoothed_loss():
    assert "right" in check_smoothed_loss(
        lambda logits, target, eps: F.cross_entropy(logits, target, label_smoothing=eps)
    )

    def over_the_others(logits, target, eps):  # eps over the V - 1 wrong tokens only
        logp = torch.log_softmax(logits, dim=-1)
        q = torch.full_like(logp, eps / (logits.shape[-1] - 1)).scatter(
            -1, target[:, None], 1 - eps
        )
        return -(q * logp).sum(-1).mean()

    assert (
        "eps=0.1: the course (like PyTorch's label_smoothing and the paper) spreads eps"
        " over all V" in one_line(check_smoothed_loss, over_the_others)
    )
    summed = lambda x, t, eps: F.cross_entropy(
        x, t, label_smoothing=eps, reduction="sum"
    )
    assert "eps=0.0: the mean over tokens, not the sum" in one_line(
        check_smoothed_loss, summed
    )
    assert "eps=0.1: smoothing mixes in eps" in one_line(
        check_smoothed_loss, lambda x, t, eps: F.cross_entropy(x, t)
    )


def test_check_sliced_loss():
    def summed(hidden, weight, bias, targets, rows, *, reduce="sum"):
        return sum(
            F.cross_entropy(
                hidden[i : i + rows] @ weight.T + bias,
                targets[i : i + rows],
                reduction=reduce,
            )
            for i in range(0, len(hidden), rows)
        )

    assert "right" in check_sliced_loss(summed)
    averaged = lambda *a: summed(*a, reduce="mean")
    assert "rows=3: the loss: add each slice's sum, not its mean" in one_line(
        check_sliced_loss, averaged
    )
    mean = lambda h, w, b, t, rows: F.cross_entropy(h @ w.T + b, t)
    assert "rows=1: the loss: sum the rows' losses" in one_line(check_sliced_loss, mean)
    detached = lambda h, w, b, t, rows: summed(h.detach(), w, b, t, rows)
    assert "has no gradient" in one_line(check_sliced_loss, detached)


def nucleus(logits, p, *, crossing=True, renormalise=True):
    probs = logits.softmax(-1)
    sorted_p, order = probs.sort(-1, descending=True)
    keep = (
        (sorted_p.cumsum(-1) - sorted_p < p) if crossing else (sorted_p.cumsum(-1) <= p)
    )
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_p * keep)
    return kept / kept.sum(-1, keepdim=True) if renormalise else kept


def test_check_top_p():
    assert "right in all 4 cases" in check_top_p(nucleus)
    assert (
        "6 tokens, p = 0.5: NaN in your result: keep the token that takes the total"
        " to p" in one_line(check_top_p, lambda x, p: nucleus(x, p, crossing=False))
    )

    def crossing_dropped(logits, p):  # keeps the top token, drops the one crossing p
        sorted_p, order = logits.softmax(-1).sort(-1, descending=True)
        keep = sorted_p.cumsum(-1) <= p
        keep[..., 0] = True
        kept = torch.zeros_like(sorted_p).scatter(-1, order, sorted_p * keep)
        return kept / kept.sum(-1, keepdim=True)

    assert (
        "keep the token that takes the total to p or past it: the nucleus"
        in one_line(check_top_p, crossing_dropped)
    )
    assert "renormalise the kept probabilities" in one_line(
        check_top_p, lambda x, p: nucleus(x, p, renormalise=False)
    )
    assert "keep the most likely tokens" in one_line(check_top_p, least_likely)


def least_likely(logits, p):
    """Top-p with the probabilities sorted the wrong way: the least likely tokens kept
    first."""
    probs = logits.softmax(-1)
    sorted_p, order = probs.sort(-1)
    kept = torch.zeros_like(probs).scatter(
        -1, order, sorted_p * (sorted_p.cumsum(-1) - sorted_p < p)
    )
    return kept / kept.sum(-1, keepdim=True)


def test_concept_answers_count_only_the_right_letters_and_name_one_that_is_no_option(
    capsys,
):
    from nmt_lib.checks.concepts import KEY, _hash, score_concepts

    right = next(letter for letter in "abcd" if _hash("05", 1, letter) == KEY["05"][0])
    wrong = next(letter for letter in "abcd" if letter != right)
    assert score_concepts("05", {1: right.upper(), 2: "e", 3: wrong}) == 1
    out = capsys.readouterr().out
    assert (
        "question 2: 'e' is not one of a, b, c, d" in out
        and "question 3: " + wrong + " is not it" in out
    )
    with pytest.raises(ValueError, match="no concept questions for chapter '99'"):
        score_concepts("99", {})
