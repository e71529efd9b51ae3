"""The exercises' check functions (nmt_lib.checks) pass right implementations and name what is wrong
in wrong ones, in one sentence."""
import math

import pytest
import torch

from nmt_lib.attention import masked_softmax
from nmt_lib.data import truncate_pad
import torch.nn.functional as F

from nmt_lib.checks import (CheckFailed, check_attention_entropy, check_beam_step, check_brevity_penalty,
                            check_masked_cross_entropy, check_masked_softmax, check_nadaraya_watson,
                            check_sinusoidal_table, check_sliced_loss, check_smoothed_loss, check_split_merge,
                            check_truncate_pad, compare)
from nmt_lib.decoding import beam_step
from nmt_lib.multihead import merge_heads, split_heads
from nmt_lib.positional import sinusoidal_table
from nmt_lib.seq2seq import masked_cross_entropy


def one_line(fn, *args):
    with pytest.raises(CheckFailed) as e:
        fn(*args)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_compare_names_the_shape_or_the_first_wrong_position():
    compare("x", torch.ones(2, 3), torch.ones(2, 3))
    assert "wrong shape (3, 2), expected (2, 3)" in one_line(compare, "x", torch.ones(3, 2), torch.ones(2, 3))
    got = torch.zeros(2, 3)
    got[1, 2] = float("nan")
    assert "at position (1, 2): got nan, expected 0" in one_line(compare, "x", got, torch.zeros(2, 3))
    assert "wrong value: got 2, expected 1" in one_line(compare, "x", 2.0, 1.0)


def test_check_masked_softmax():
    assert "right" in check_masked_softmax(masked_softmax)
    assert "wrong value at position" in one_line(check_masked_softmax, lambda s, lens: torch.softmax(s, -1))

    def nan_rows(scores, lens):                    # -inf fill: NaN for a row with no valid key
        mask = torch.arange(scores.shape[-1]) < (lens[:, None, None] if lens.dim() == 1 else lens[..., None])
        return torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
    assert "no valid key" in one_line(check_masked_softmax, nan_rows)
    assert "wrong shape" in one_line(check_masked_softmax, lambda s, lens: masked_softmax(s, lens)[:, 0])


def test_check_brevity_penalty():
    bp = lambda h, r: 1.0 if h >= r else math.exp(1 - r / h)
    assert "right" in check_brevity_penalty(bp)
    assert "8-token output" in one_line(check_brevity_penalty, lambda h, r: min(1.0, h / r))
    assert "12-token output" in one_line(check_brevity_penalty, lambda h, r: math.exp(1 - r / h))   # > 1 when longer


def test_check_split_merge():
    assert "right" in check_split_merge(split_heads, merge_heads)
    plain = lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1)
    assert "split(x, 4)" in one_line(check_split_merge, plain, merge_heads)
    assert "wrong shape" in one_line(check_split_merge, lambda x, h: x.view(x.shape[0], x.shape[1], h, -1), merge_heads)
    assert "merge" in one_line(check_split_merge, split_heads, lambda y: y.reshape(y.shape[0], y.shape[2], -1))


def test_check_nadaraya_watson():
    def nw(q, k, v, width):
        return torch.softmax(-((q[:, None] - k[None, :]) / width) ** 2 / 2, dim=1) @ v
    assert "right" in check_nadaraya_watson(nw)
    unnormalised = lambda q, k, v, width: torch.exp(-((q[:, None] - k[None, :]) / width) ** 2 / 2) @ v
    assert "width 0.3: wrong value at position (0,)" in one_line(check_nadaraya_watson, unnormalised)
    assert "wrong shape" in one_line(check_nadaraya_watson, lambda q, k, v, width: nw(q, k, v, width)[None])


def test_check_sinusoidal_table():
    assert "right" in check_sinusoidal_table(sinusoidal_table)
    swapped = lambda T, D: torch.cat([sinusoidal_table(T, D)[:, 0::2], sinusoidal_table(T, D)[:, 1::2]], dim=1)
    assert "max_len=5, d_model=4: wrong value at position (0, 1)" in one_line(check_sinusoidal_table, swapped)


def test_check_truncate_pad():
    assert "right" in check_truncate_pad(truncate_pad)
    in_front = lambda ids, n, pad: [pad] * (n - len(ids)) + ids[:n]
    assert "truncate_pad([5, 6, 7], 5, pad_id=0): wrong value at position (0,)" in one_line(check_truncate_pad, in_front)
    assert "wrong shape (6,), expected (4,)" in one_line(check_truncate_pad, lambda ids, n, pad: ids + [pad] * (n - len(ids)))


def test_check_masked_cross_entropy():
    assert "right" in check_masked_cross_entropy(masked_cross_entropy)
    over_all = lambda logits, tgt, pad: (F.cross_entropy(logits.flatten(0, 1), tgt.flatten()), tgt.numel())
    assert "padding: the loss: wrong value" in one_line(check_masked_cross_entropy, over_all)
    pad0 = lambda logits, tgt, pad: masked_cross_entropy(logits, tgt, 0)           # ignores the pad id given
    assert "pad_id 1: the loss" in one_line(check_masked_cross_entropy, pad0)
    assert "return (loss, n_tokens)" in one_line(check_masked_cross_entropy, lambda x, t, p: masked_cross_entropy(x, t, p)[0])


def test_check_beam_step():
    assert "right" in check_beam_step(beam_step)

    def no_stay(scores, logp, finished, eos_id):               # a finished beam pays for more tokens
        B, K, V = logp.shape
        top_scores, top = (scores.unsqueeze(-1) + logp).view(B, K * V).topk(K, dim=-1)
        return top_scores, top // V, top % V
    assert "finished beams, scores: wrong value at position (0, 0)" in one_line(check_beam_step, no_stay)

    def per_beam(scores, logp, finished, eos_id):               # each beam keeps its own best token only
        best, token = (scores.unsqueeze(-1) + logp).max(-1)
        return best, torch.arange(logp.shape[1]).expand_as(best), token
    assert "the first step (one live beam), scores" in one_line(check_beam_step, per_beam)


def test_check_attention_entropy():
    right = lambda w: -(w * torch.where(w > 0, w, 1.0).log()).sum(-1).mean(-1)
    assert "right" in check_attention_entropy(right)
    assert "one-hot rows: wrong value" in one_line(check_attention_entropy, lambda w: -(w * w.log()).sum(-1).mean(-1))
    assert "wrong shape (3,), expected ()" in one_line(check_attention_entropy,
                                                       lambda w: -(w * torch.where(w > 0, w, 1.0).log()).sum(-1))


def test_check_smoothed_loss():
    assert "right" in check_smoothed_loss(lambda logits, target, eps: F.cross_entropy(logits, target, label_smoothing=eps))

    def over_the_others(logits, target, eps):                   # eps over the V - 1 wrong tokens only
        logp = torch.log_softmax(logits, dim=-1)
        q = torch.full_like(logp, eps / (logits.shape[-1] - 1)).scatter(-1, target[:, None], 1 - eps)
        return -(q * logp).sum(-1).mean()
    assert "eps=0.1: wrong value" in one_line(check_smoothed_loss, over_the_others)


def test_check_sliced_loss():
    def summed(hidden, weight, bias, targets, rows):
        return sum(F.cross_entropy(hidden[i:i + rows] @ weight.T + bias, targets[i:i + rows], reduction="sum")
                   for i in range(0, len(hidden), rows))
    assert "right" in check_sliced_loss(summed)

    def averaged(hidden, weight, bias, targets, rows):
        return sum(F.cross_entropy(hidden[i:i + rows] @ weight.T + bias, targets[i:i + rows])
                   for i in range(0, len(hidden), rows))
    assert "rows=3: the loss: wrong value" in one_line(check_sliced_loss, averaged)
    detached = lambda h, w, b, t, rows: summed(h.detach(), w, b, t, rows)
    assert "has no gradient" in one_line(check_sliced_loss, detached)
