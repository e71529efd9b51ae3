"""The hidden cases of assignment 1, for the teacher: other sizes, windows, heads and
masks than the public grader's, and gradients, compared with references built from
chapter 3's causal mask and PyTorch's attention."""

import torch
import torch.nn.functional as F

from nmt_lib.checks.core import CheckFailed, compare, gradients_of, learner_call
from nmt_lib.checks.transformer import load_course_weights, output_of


def _window_reference(tq, tk, window):
    from nmt_lib.attention import causal_mask

    return causal_mask(tq, tk, offset=tk - tq) & ~causal_mask(
        tq, tk, offset=tk - tq - window
    )


def _alibi_reference(h, tq, tk):
    slopes = 2.0 ** (-8 * torch.arange(1, h + 1) / h)  # (H,)
    distance = (torch.arange(tk - tq, tk)[:, None] - torch.arange(tk)).abs()  # (Tq, Tk)
    return -slopes[:, None, None] * distance


def window_mask(fn):
    cases = ((7, 7, 3), (1, 9, 4), (5, 12, 1), (4, 4, 10), (300, 300, 64))
    for tq, tk, window in cases:
        case = f"{tq} queries, {tk} keys, window {window}"
        got = learner_call(case, fn, tq, tk, window)
        compare(case, got, _window_reference(tq, tk, window))


def alibi_bias(fn):
    for h, tq, tk in ((8, 6, 6), (3, 2, 7), (16, 1, 20)):
        case = f"{h} heads, {tq} queries, {tk} keys"
        got = learner_call(case, fn, h, tq, tk)
        compare(case, got, _alibi_reference(h, tq, tk), atol=1e-6)


def _local_reference(course, x, mask, window, alibi):
    """Chapter 5's projections around PyTorch's attention, given the bias and the window
    as a float mask."""
    from nmt_lib.multihead import merge_heads, split_heads

    B, T, _ = x.shape
    H = course.n_heads
    q, k, v = (split_heads(W(x), H) for W in (course.W_q, course.W_k, course.W_v))
    allowed = torch.ones(T, T, dtype=torch.bool) if mask is None else mask
    allowed = (allowed.unsqueeze(1) if allowed.dim() == 3 else allowed).expand(
        B, H, T, T
    )
    if window is not None:
        allowed = allowed & _window_reference(T, T, window)
    bias = _alibi_reference(H, T, T) if alibi else torch.zeros(H, T, T)
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=bias.masked_fill(~allowed, float("-inf"))
    )
    return course.W_o(merge_heads(out))


def local_attention(cls):
    from nmt_lib.attention import causal_mask, lens_to_mask
    from nmt_lib.multihead import MultiHeadAttention

    gen = torch.Generator().manual_seed(2026)
    for d, h, window, mask in (
        (32, 8, None, lens_to_mask([9, 7], 9)),
        (32, 8, 4, lens_to_mask([9, 7], 9)),
        (12, 1, 2, causal_mask(9)),
        (16, 4, None, causal_mask(9) & lens_to_mask([9, 6], 9)),
    ):
        case = f"cls({d}, {h}, window={window}) with a {tuple(mask.shape)} mask"
        torch.manual_seed(d + (window or 0))
        course = MultiHeadAttention(d, h).eval()
        mine = learner_call(case, cls, d, h, window=window)
        load_course_weights(case, mine, course)
        x = torch.randn(2, 9, d, generator=gen, requires_grad=True)
        got = output_of(learner_call(case, mine, x.detach(), mask))
        expected = _local_reference(course, x, mask, window, alibi=True)
        compare(case, got, expected.detach())
        g = torch.randn(expected.shape, generator=gen)
        found = gradients_of(case, mine, [x], g, ["W_q.weight"], mask)
        wanted = torch.autograd.grad((expected * g).sum(), (x, course.W_q.weight))
        for name, f, w in zip(("x", "W_q's weight"), found, wanted):
            if f is None:
                raise CheckFailed(f"{case}: no gradient reaches {name}")
            compare(f"{case}: the gradient with respect to {name}", f, w, atol=1e-4)
