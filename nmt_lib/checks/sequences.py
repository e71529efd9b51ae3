"""Graders for chapters 1 to 4b: padding, attention pooling, the masked softmax, scaled
dot-product attention, BLEU's brevity penalty and the masked loss. Each names the
failing case and, for a usual mistake, why.
"""

import math

import torch

from nmt_lib.checks.core import CheckFailed, learner_call, named_mistake, parts, passed
from nmt_lib.checks.core import result

OVER_KEYS = (
    "the weights sum to 1 over the keys, not over the queries: softmax over the last"
    " dimension"
)


def check_truncate_pad(fn) -> str:
    """`fn(ids, num_steps, pad_id)` -> `ids` cut or padded to `num_steps`, against
    chapter 1's `truncate_pad`."""
    from nmt_lib.data import truncate_pad  # chapter 1's, imported where used

    cases = [([5, 6, 7], 5, 0), ([5, 6, 7, 8, 9, 10], 4, 0), ([5, 6], 2, 1), ([], 3, 1)]
    for ids, num_steps, pad_id in cases:
        case = f"truncate_pad({ids}, {num_steps}, pad_id={pad_id})"
        got = learner_call(case, fn, list(ids), num_steps, pad_id)
        if not isinstance(got, (list, tuple)):
            raise CheckFailed(f"{case}: return a list of ids, got {type(got).__name__}")
        short = max(num_steps - len(ids), 0)
        mistakes = {
            (
                "the padding goes at the end, after the sentence (the model reads "
                "from the start)"
            ): ([pad_id] * short + list(ids)[:num_steps]),
            "cut the end off, keeping the first num_steps ids (the sentence's start)": (
                list(ids)[-num_steps:] + [pad_id] * short
            ),
        }
        named_mistake(
            case,
            torch.tensor(list(got), dtype=torch.long),
            torch.tensor(truncate_pad(ids, num_steps, pad_id)),
            {why: torch.tensor(w, dtype=torch.long) for why, w in mistakes.items()},
        )
    return passed("truncate_pad", cases)


def check_nadaraya_watson(fn) -> str:
    """`fn(x_query (Q,), x_key (K,), y_value (K,), width)` -> predictions (Q,) with a
    Gaussian kernel."""
    gen = torch.Generator().manual_seed(0)
    x_key, y_value = torch.rand(12, generator=gen) * 5, torch.randn(12, generator=gen)
    x_query = torch.linspace(0, 5, 7)
    widths = (0.3, 1.0, 4.0)
    for width in widths:
        distance = x_query[:, None] - x_key[None, :]
        pool = lambda scores, dim=1: torch.softmax(scores, dim=dim) @ y_value
        mistakes = {
            (
                "divide the distance by the width (a wide kernel averages more keys); "
                "you multiplied"
            ): pool(-((distance * width) ** 2) / 2),
            (
                "the weights sum to 1 over the keys, not over the queries: softmax "
                "over dim 1 of (Q, K) scores"
            ): (
                (torch.softmax(-((distance / width) ** 2) / 2, dim=0) * y_value).sum(1)
            ),
            (
                "the score is minus the squared distance: without the minus sign far "
                "keys get the most weight"
            ): pool((distance / width) ** 2 / 2),
        }
        case = f"predictions with width {width}"
        named_mistake(
            case,
            learner_call(case, fn, x_query, x_key, y_value, width),
            pool(-((distance / width) ** 2) / 2),
            mistakes,
        )
    return passed("Nadaraya-Watson", widths)


def check_masked_softmax(fn) -> str:
    """`fn(scores (..., Tq, Tk), mask)` with a boolean mask (True = may attend) of any
    shape that broadcasts to the scores, against chapter 3's `masked_softmax`: masked
    keys get weight 0, a row with none allowed all 0.
    """
    # chapter 3's
    from nmt_lib.attention import causal_mask, lens_to_mask, masked_softmax

    gen = torch.Generator().manual_seed(0)
    r = lambda *shape: torch.randn(*shape, generator=gen) * 3
    cases = {
        "a padding mask of shape (B, 1, Tk)": (r(2, 3, 5), lens_to_mask([5, 2], 5)),
        "a causal mask of shape (Tq, Tk)": (r(2, 4, 4), causal_mask(4)),
        "a (B, Tq, Tk) mask": (r(2, 3, 4), lens_to_mask([[1, 2, 4], [4, 3, 3]], 4)),
        "heads: (B, H, Tq, Tk) scores, a (B, 1, 1, Tk) mask": (
            r(2, 3, 2, 4),
            lens_to_mask([3, 4], 4)[:, None],
        ),
        "a batch row with no allowed key": (r(2, 3, 5), lens_to_mask([0, 3], 5)),
    }
    for case, (scores, mask) in cases.items():
        got = result(case, learner_call(case, fn, scores.clone(), mask.clone()))
        expected = masked_softmax(scores, mask=mask)
        if got.isnan().any() and not expected.isnan().any():
            raise CheckFailed(
                f"{case}: NaN where a row has no allowed key: fill masked scores with a"
                " very negative finite number (torch.finfo(dtype).min), not -inf, and"
                " multiply the weights by the mask so that such a row is all zeros"
            )
        low = torch.finfo(scores.dtype).min
        mistakes = [
            (
                (
                    "a row with no allowed key must be all zeros, not uniform: multiply"
                    " the weights by the mask"
                ),
                torch.softmax(scores.masked_fill(~mask, low), dim=-1),
            ),
            (OVER_KEYS, torch.softmax(scores.masked_fill(~mask, low), dim=-2) * mask),
            (OVER_KEYS, torch.softmax(scores.masked_fill(~mask, low), dim=-2)),
            (
                "True means may attend: you gave the weight to the masked keys",
                masked_softmax(scores, mask=~mask),
            ),
            (
                (
                    "a masked score of 0 still gets weight exp(0): fill masked scores"
                    " with a very negative number"
                ),
                torch.softmax(scores.masked_fill(~mask, 0.0), dim=-1),
            ),
            (
                (
                    "zeroing weights after the softmax leaves rows that do not sum to"
                    " 1: mask the scores before it"
                ),
                torch.softmax(scores, dim=-1) * mask,
            ),
            (
                "the mask was not applied: masked keys must get weight 0",
                torch.softmax(scores, dim=-1),
            ),
        ]
        named_mistake(case, got, expected, mistakes)
    return passed("masked softmax", cases)


def check_attention(fn) -> str:
    """`fn(q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv), mask or None)` -> (output
    (..., Tq, dv), weights (..., Tq, Tk)), scaled dot-product attention, against chapter
    3's `attend(..., need_weights=True)`.
    """
    # chapter 3's
    from nmt_lib.attention import attend, causal_mask, lens_to_mask, masked_softmax

    gen = torch.Generator().manual_seed(0)
    r = lambda *shape: torch.randn(*shape, generator=gen)
    cases = {
        "no mask, 3 queries over 5 keys of width 16": (
            r(2, 3, 16),
            r(2, 5, 16),
            r(2, 5, 6),
            None,
        ),
        "a padding mask of shape (B, 1, Tk)": (
            r(2, 3, 8),
            r(2, 5, 8),
            r(2, 5, 4),
            lens_to_mask([5, 2], 5),
        ),
        "heads: (B, H, T, d) with a causal mask": (
            r(2, 3, 4, 8),
            r(2, 3, 4, 8),
            r(2, 3, 4, 8),
            causal_mask(4),
        ),
    }
    for case, (q, k, v, mask) in cases.items():
        got = parts(
            case,
            learner_call(case, fn, q.clone(), k.clone(), v.clone(), mask),
            ("output", "weights"),
        )
        expected = attend(q, k, v, mask, need_weights=True)
        raw = q @ k.transpose(-2, -1)
        weights = lambda scores, dim=-1: (
            masked_softmax(scores, mask=mask)
            if dim == -1
            else torch.softmax(
                scores if mask is None else scores.masked_fill(~mask, -1e9), dim=dim
            )
        )
        d = q.shape[-1]
        mistakes = {
            (
                "divide the scores by sqrt(d), d the width of queries and keys: "
                "unscaled, wide vectors give near one-hot weights"
            ): weights(raw),
            "divide the scores by sqrt(d), not by d": weights(raw / d),
            OVER_KEYS: weights(raw / math.sqrt(d), dim=-2),
        }
        named_mistake(f"{case}: the weights", got[1], expected[1], mistakes)
        named_mistake(
            f"{case}: the output",
            got[0],
            expected[0],
            {
                (
                    "the output is weights @ v, the softmax's weights times the "
                    "values, not the scores @ v"
                ): ((raw / math.sqrt(d)) @ v)
            },
        )
    return passed("scaled dot-product attention", cases)


def check_brevity_penalty(fn) -> str:
    """`fn(hyp_len, ref_len)` -> BLEU's brevity penalty: 1 if hyp_len >= ref_len, else
    exp(1 - ref_len / hyp_len)."""
    cases = [(10, 10), (12, 10), (8, 10), (1, 7), (20, 21)]
    for c, r in cases:
        case = f"brevity penalty of a {c}-token output against a {r}-token reference"
        got = result(case, learner_call(case, fn, c, r))
        mistakes = {
            (
                "an output at least as long as the reference is not penalised: the "
                "penalty is 1"
            ): math.exp(1 - r / c),
            (
                "the exponent is 1 - ref_len / hyp_len (reference over output), not "
                "the other way round"
            ): (1.0 if c >= r else math.exp(1 - c / r)),
            (
                "the penalty is exponential, exp(1 - ref_len / hyp_len), not the "
                "ratio hyp_len / ref_len"
            ): min(1.0, c / r),
        }
        named_mistake(
            case, got.double(), 1.0 if c >= r else math.exp(1 - r / c), mistakes
        )
    return passed("brevity penalty", cases)


def check_masked_cross_entropy(fn) -> str:
    """`fn(logits (B, T, V), tgt_out (B, T), pad_id)` -> (mean loss over non-pad tokens,
    their count), against chapter 4b's `masked_cross_entropy`."""
    import torch.nn.functional as F

    # chapter 4b's, imported where used
    from nmt_lib.seq2seq import masked_cross_entropy

    logits = torch.randn(3, 4, 7, generator=torch.Generator().manual_seed(0))
    cases = {
        "no padding": (torch.tensor([[3, 4, 5, 2], [6, 3, 4, 2], [5, 5, 6, 2]]), 0),
        "padding": (torch.tensor([[3, 4, 5, 2], [6, 2, 0, 0], [2, 0, 0, 0]]), 0),
        "pad_id 1": (
            torch.tensor([[3, 0, 5, 2], [6, 2, 1, 1], [2, 1, 1, 1]]),
            1,
        ),  # 0 is a word here
    }
    for case, (tgt, pad_id) in cases.items():
        got = parts(
            case,
            learner_call(case, fn, logits.clone(), tgt.clone(), pad_id),
            ("loss", "n_tokens"),
        )
        loss, n = masked_cross_entropy(logits, tgt, pad_id)
        every = F.cross_entropy(logits.transpose(1, 2), tgt, reduction="none")  # (B, T)
        real = tgt != pad_id
        mistakes = {
            "padding is the token pad_id, not always 0": masked_cross_entropy(
                logits, tgt, 0
            )[0],
            "average over the real tokens only: the padding counted in your mean": (
                every.mean()
            ),
            "return the mean over the real tokens, not their sum": (every * real).sum(),
        }
        if pad_id == 0:
            del mistakes["padding is the token pad_id, not always 0"]
        named_mistake(f"{case}: the loss", got[0], loss, mistakes)
        named_mistake(
            f"{case}: the number of real tokens",
            result(case, got[1]).double(),
            float(n),
            {"count the real tokens only, not the padding": float(tgt.numel())},
        )
    return passed("masked cross-entropy", cases)
