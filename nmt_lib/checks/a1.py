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
    """`fn(num_queries, num_keys, window)` -> the (Tq, Tk) boolean mask of task 1: the
    queries are the last Tq of the Tk positions, and each sees the latest `window`
    positions up to its own. A failure names the case, not the mask expected."""
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
            causal_mask(6)[3:],  # the last 3 queries of 6 positions
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
        compare(case, got, expected.bool(), show=False)
    return passed("sliding-window mask", cases)


def check_alibi_bias(fn) -> str:
    """`fn(n_heads, num_queries, num_keys)` -> the (H, Tq, Tk) bias of task 2, checked
    against what the task states: each head's bias is its slope times how far the key
    lies from the query, as a penalty, and the slopes are a geometric sequence whose
    first term is its ratio and whose last is 1/256. A failure names the case and the
    property, not the values expected (the teacher's hidden cases compare them)."""
    t = torch.tensor
    cases = {  # how far each key lies from each query, the queries the last Tq
        "1 head, 3 queries, 3 keys": (1, t([[0, 1, 2], [1, 0, 1], [2, 1, 0]])),
        "2 heads, 1 query, 4 keys": (2, t([[3, 2, 1, 0]])),
        "4 heads, 2 queries, 3 keys": (4, t([[1, 0, 1], [2, 1, 0]])),
    }
    for case, (h, far) in cases.items():
        got = result(case, learner_call(case, fn, h, *far.shape))
        if not got.is_floating_point():
            raise CheckFailed(f"{case}: return a float tensor, got {got.dtype}")
        if tuple(got.shape) != (h, *far.shape):
            raise CheckFailed(
                f"{case}: wrong shape {tuple(got.shape)}, expected {(h, *far.shape)}"
            )
        if (got > 0).any():
            raise CheckFailed(
                f"{case}: the bias is a penalty, 0 at the query's own position and"
                " more negative with distance; yours has positive values"
            )
        slopes = 0.0 - got[:, far == 1][:, 0].double()  # (H,): one key away
        compare(
            f"{case}: each head's bias should be its slope times the distance",
            got,
            -slopes[:, None, None] * far,
            show=False,
        )
        if same(slopes[0], 1.0, atol=1e-7):
            raise CheckFailed(
                f"{case}: your slopes are one step off in the geometric sequence: "
                "the first head's slope is the sequence's first term, not 1"
            )
        if not same(slopes[-1], 1 / 256, atol=1e-7):
            raise CheckFailed(
                f"{case}: the last head's slope is {slopes[-1]:.4g}, not 1/256"
            )
        if not same(slopes[1:] / slopes[:-1], slopes[:1].expand(h - 1), atol=1e-7):
            raise CheckFailed(
                f"{case}: your slopes {[round(float(m), 6) for m in slopes]} are not a"
                " geometric sequence whose ratio is its first term"
            )
    return passed("ALiBi bias", cases)


def _slices(course, x, window):
    """Chapter 5's multi-head attention of each position over the latest `window`
    positions up to its own, one position at a time."""
    rows = []
    for t in range(x.shape[1]):
        seen = x[:, : t + 1][:, -window:]
        rows.append(course(x[:, t : t + 1], seen, seen))
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
        building = f"building cls(16, 4, window={window}, alibi=False)"
        mine = learner_call(building, cls, 16, 4, window=window, alibi=False)
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
