"""Graders for chapter 12: RMSNorm, rotary position embedding (RoPE) and the key/value
sharing of grouped-query attention."""

import torch

from nmt_lib.checks.core import CheckFailed, learner_call, named_mistake, passed, result

RMS_MISTAKES = (
    "you subtracted the mean: that is LayerNorm; RMSNorm divides x itself",
    "the mean of squares is over the last dimension (each vector's features)",
    "divide by the square root of the mean of squares, not by the mean of squares",
    "the gain multiplies the result: you left it out",
)


def check_rms_norm(fn) -> str:
    """`fn(x (..., D), weight (D,), eps)` -> RMSNorm of x, against chapter 12's."""
    from nmt_lib.modern import RMSNorm  # chapter 12's, imported where used

    gen = torch.Generator().manual_seed(0)
    cases = {
        "a (2, 5, 8) batch with mean 1": torch.randn(2, 5, 8, generator=gen) + 1,
        "a (3, 6) batch": torch.randn(3, 6, generator=gen) * 3,
        "a vector of zeros": torch.zeros(1, 4),
    }
    for case, x in cases.items():
        norm = RMSNorm(x.shape[-1], eps=1e-6)
        with torch.no_grad():
            norm.weight.uniform_(0.5, 1.5, generator=gen)
        w = norm.weight.detach()
        got = result(case, learner_call(case, fn, x.clone(), w.clone(), 1e-6))
        squares = x.pow(2)
        expected = norm(x).detach()
        if got.isnan().any() and not expected.isnan().any():
            raise CheckFailed(
                f"{case}: NaN in your result: add eps under the square root, so that a"
                " vector of zeros is divided by sqrt(eps), not by 0"
            )
        wrong = (
            w * torch.nn.functional.layer_norm(x, x.shape[-1:], eps=1e-6),
            w * x / torch.sqrt(squares.mean(0, keepdim=True) + 1e-6),
            w * x / (squares.mean(-1, keepdim=True) + 1e-6),
            x / torch.sqrt(squares.mean(-1, keepdim=True) + 1e-6),
        )
        named_mistake(case, got, expected, dict(zip(RMS_MISTAKES, wrong)))
    return passed("RMSNorm", cases)


def turned(x, start: int, *, sign: int = 1, halves: bool = False):
    """Chapter 12's rotation of x (..., T, Dh) from position `start`, or a usual
    mistake: turned the other way (`sign=-1`), or pairing the two halves."""
    T, Dh = x.shape[-2:]
    inv_freq = 10_000.0 ** (-torch.arange(0, Dh, 2) / Dh)
    angles = sign * torch.arange(start, start + T)[:, None].float() * inv_freq
    c, s = angles.cos(), angles.sin()
    if halves:
        a, b = x[..., : Dh // 2], x[..., Dh // 2 :]
        return torch.cat([a * c - b * s, a * s + b * c], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)


ROPE_MISTAKES = (
    "positions start at `start`, not 0 (a cached step is not position 0)",
    (
        "turned clockwise: the course follows the paper, x'_2j = x_2j cos - x_2j+1 sin"
        " and x'_2j+1 = x_2j sin + x_2j+1 cos (just as relative, but not this function)"
    ),
    (
        "the course pairs neighbouring features (2j, 2j + 1), as the paper does;"
        " pairing the two halves (GPT-NeoX's layout) permutes the features, so it is"
        " not this function"
    ),
)


def check_rope(fn) -> str:
    """`fn(x (..., T, Dh), start)` -> x turned at positions start, start + 1, ...,
    against chapter 12's `rotate`."""
    from nmt_lib.modern import rotate  # chapter 12's, imported where used

    gen = torch.Generator().manual_seed(0)
    cases = {
        "positions 0 .. 5 of a (2, 6, 8) tensor": (
            torch.randn(2, 6, 8, generator=gen),
            0,
        ),
        "one cached step at position 9": (torch.randn(1, 1, 4, generator=gen), 9),
        "heads: a (2, 3, 5, 16) tensor from position 3": (
            torch.randn(2, 3, 5, 16, generator=gen),
            3,
        ),
    }
    for case, (x, start) in cases.items():
        got = learner_call(case, fn, x.clone(), start)
        wrong = (turned(x, 0), turned(x, start, sign=-1), turned(x, start, halves=True))
        named_mistake(case, got, rotate(x, start), dict(zip(ROPE_MISTAKES, wrong)))
    return passed("RoPE", cases)


def check_kv_sharing(fn) -> str:
    """`fn(k (B, G, T, Dh), n_heads)` -> (B, H, T, Dh), query head h reading key/value
    head h // (H / G), as chapter 12's `GroupedQueryAttention` lines them up."""
    gen = torch.Generator().manual_seed(0)
    cases = {
        "2 key/value heads for 4 query heads": (2, 4),
        "1 key/value head for 4 query heads (multi-query)": (1, 4),
        "4 key/value heads for 4 query heads (multi-head)": (4, 4),
        "2 key/value heads for 6 query heads": (2, 6),
    }
    why = (
        "query head h reads key/value head h // (H / G): neighbouring query heads share"
        " one (repeat_interleave), not every G-th (repeat)"
    )
    for case, (G, H) in cases.items():
        k = torch.randn(2, G, 3, 4, generator=gen)
        got = learner_call(case, fn, k.clone(), H)
        wrong = {why: k.repeat(1, H // G, 1, 1)}
        named_mistake(case, got, k.repeat_interleave(H // G, dim=1), wrong)
    return passed("key/value sharing", cases)
