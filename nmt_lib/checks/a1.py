"""The public graders of assignment 1, attention that prefers what is near: a
sliding-window mask, the ALiBi bias, and a multi-head attention with both. Each checks a
learner's answer against the chapters' code where the two must agree (chapter 3's causal
mask, chapter 5's attention), and against properties that define the task elsewhere;
the teacher's hidden cases compare every value (`grading/a1.py`)."""

import torch

from nmt_lib.checks.core import CheckFailed, compare, gradients_of, learner_call, passed
from nmt_lib.checks.core import result, same
from nmt_lib.checks.transformer import load_course_weights, output_of


def check_window_mask(fn) -> str:
    """`fn(num_queries, num_keys, window)` -> the (Tq, Tk) boolean mask that lets the
    query at position p (the queries are the last Tq of the Tk positions) see keys p -
    window + 1 .. p."""
    from nmt_lib.attention import causal_mask  # chapter 3's

    t = torch.tensor
    cases = {
        "4 queries, 4 keys, window 2": (
            (4, 4, 2),
            t([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]),
        ),
        "1 query (the newest of 5 positions, as with a KV cache), window 3": (
            (1, 5, 3),
            t([[0, 0, 1, 1, 1]]),
        ),
        "3 queries, 5 keys, window 2": (
            (3, 5, 2),
            t([[0, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]]),
        ),
        "window 1: each query sees itself": ((3, 3, 1), torch.eye(3)),
        "a window wider than the keys: chapter 3's causal mask": (
            (3, 6, 9),
            causal_mask(3, 6, offset=3),
        ),
        "a window as wide as the keys: chapter 3's causal mask": (
            (5, 5, 5),
            causal_mask(5),
        ),
    }
    for case, ((tq, tk, window), expected) in cases.items():
        got = result(case, learner_call(case, fn, tq, tk, window))
        if got.dtype != torch.bool:
            raise CheckFailed(
                f"{case}: return a boolean mask (True = may attend), got {got.dtype}"
            )
        if tuple(got.shape) == (tq, tk):
            later = torch.ones(tq, tk, dtype=torch.bool).triu(tk - tq + 1)
            if (got & later).any():
                raise CheckFailed(
                    f"{case}: a query sees a later key; the window looks back only (the"
                    " queries are the last Tq positions)"
                )
            seen = got.sum(-1)
            if (seen > window).any():
                raise CheckFailed(
                    f"{case}: a query sees {int(seen.max())} keys; the window holds"
                    f" itself and the window - 1 keys before it, {window} in all"
                )
        compare(case, got, expected.bool())
    return passed("sliding-window mask", cases)


def check_alibi_bias(fn) -> str:
    """`fn(n_heads, num_queries, num_keys)` -> the (H, Tq, Tk) ALiBi bias -m_h |p - j|,
    m_h = 2^(-8h/H) for h = 1..H, the queries at the last Tq positions."""
    m1, m2, m = 2.0**-4, 2.0**-8, 2.0**-8
    t = torch.tensor
    cases = {
        "1 head, 3 queries, 3 keys (m = 1/256)": (
            (1, 3, 3),
            t([[[0, -m, -2 * m], [-m, 0, -m], [-2 * m, -m, 0]]]),
        ),
        "2 heads (m = 1/16 and 1/256), 1 query, 4 keys": (
            (2, 1, 4),
            t([[[-3 * m1, -2 * m1, -m1, 0]], [[-3 * m2, -2 * m2, -m2, 0]]]),
        ),
        "4 heads, 2 queries, 3 keys": (
            (4, 2, 3),
            t(
                [
                    [[-s, 0, -s], [-2 * s, -s, 0]]
                    for s in (2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8)
                ]
            ),
        ),
    }
    for case, ((h, tq, tk), expected) in cases.items():
        got = result(case, learner_call(case, fn, h, tq, tk))
        if not got.is_floating_point():
            raise CheckFailed(f"{case}: return a float tensor, got {got.dtype}")
        if tuple(got.shape) == tuple(expected.shape):
            if (got > 0).any():
                raise CheckFailed(
                    f"{case}: the bias is a penalty, 0 at the query's own position and"
                    " more negative with distance; yours has positive values"
                )
            # slope 2^0 = 1 for the first head
            from_zero = expected[0, 0] * 2.0 ** (8 / h)
            if not same(got[0, 0], expected[0, 0], atol=1e-6) and same(
                got[0, 0], from_zero, atol=1e-6
            ):
                raise CheckFailed(
                    f"{case}: your slopes are one step off in the geometric sequence: "
                    "the first head's slope is the sequence's first term, not 1"
                )
        compare(case, got, expected)
    return passed("ALiBi bias", cases)


def _slices(course, x, window):
    """Chapter 5's multi-head attention of each position over its window, one position
    at a time."""
    rows = [
        course(
            x[:, t : t + 1],
            x[:, max(0, t - window + 1) : t + 1],
            x[:, max(0, t - window + 1) : t + 1],
        )
        for t in range(x.shape[1])
    ]
    return torch.cat(rows, dim=1)


def check_local_attention(cls) -> str:
    """`cls(d_model, n_heads, window=None, alibi=True)`: multi-head self-attention with
    the ALiBi bias (when `alibi`) and a sliding window (when `window`), `forward(x,
    mask=None)` -> (B, T, D). Without the bias it must be chapter 5's attention; the
    bias is checked by what it must do."""
    from nmt_lib.attention import causal_mask, lens_to_mask  # chapter 3's
    from nmt_lib.multihead import MultiHeadAttention  # chapter 5's

    torch.manual_seed(0)
    course = MultiHeadAttention(16, 4).eval()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 6, 16, generator=gen)
    plain = learner_call("building cls(16, 4, alibi=False)", cls, 16, 4, alibi=False)
    load_course_weights("cls(16, 4, alibi=False)", plain, course)
    agree = {
        "no bias, no mask": (None, course(x, x, x)),
        "no bias, a padding mask (B, 1, T)": (
            lens_to_mask([6, 4], 6),
            course(x, x, x, lens_to_mask([6, 4], 6)),
        ),
        "no bias, a causal mask (T, T)": (
            causal_mask(6),
            course(x, x, x, causal_mask(6).expand(2, 6, 6)),
        ),
    }
    for case, (mask, expected) in agree.items():
        compare(
            f"{case}: against chapter 5's MultiHeadAttention",
            output_of(learner_call(case, plain, x, mask)),
            expected.detach(),
        )
    for window in (1, 3):
        case = f"no bias, window {window}"
        mine = learner_call(
            f"building cls(16, 4, window={window}, alibi=False)",
            cls,
            16,
            4,
            window=window,
            alibi=False,
        )
        load_course_weights(case, mine, course)
        compare(
            f"{case}: against chapter 5's attention of each position over its window",
            output_of(learner_call(case, mine, x)),
            _slices(course, x, window).detach(),
        )
    local = learner_call("building cls(16, 4, window=3)", cls, 16, 4, window=3)
    load_course_weights("cls(16, 4, window=3)", local, course)
    (dx,) = gradients_of("ALiBi, window 3", local, [x], torch.ones(2, 6, 16))
    if dx is None:
        raise CheckFailed(
            "ALiBi, window 3: no gradient reaches the input: keep it in autograd"
        )
    out = output_of(learner_call("ALiBi, window 3", local, x))
    with torch.no_grad():
        compare(
            "ALiBi, window 3: position 0 sees only itself, where the bias is 0",
            out[:, :1],
            course(x[:, :1], x[:, :1], x[:, :1]),
        )
        compare(
            "ALiBi, window 3: the last position over its window alone (the bias depends"
            " on distance only)",
            out[:, -1],
            output_of(
                learner_call("ALiBi, window 3, the last 3 positions", local, x[:, -3:])
            )[:, -1],
        )
        if torch.allclose(out[:, 1:], _slices(course, x, 3)[:, 1:], atol=1e-5):
            raise CheckFailed(
                "ALiBi, window 3: the output is chapter 5's attention: the bias was not"
                " added"
            )
        full = learner_call("building cls(16, 4)", cls, 16, 4)
        load_course_weights("cls(16, 4)", full, course)
        both = output_of(learner_call("ALiBi, no window", full, x))
        if torch.allclose(both, course(x, x, x), atol=1e-5):
            raise CheckFailed(
                "ALiBi, no window: the output is chapter 5's attention: the bias was"
                " not added"
            )
    return passed(
        "multi-head attention with ALiBi and a window", [*agree, 1, 3, "alibi"]
    )
