"""Graders for chapters 8 to 11: the entropy of attention, BPE's `encode_word`, the
label-smoothed loss, the loss computed a slice at a time, and top-p sampling."""

import math

import torch
import torch.nn.functional as F

from nmt_lib.checks.core import CheckFailed, compare, learner_call, named_mistake
from nmt_lib.checks.core import passed, result


def check_attention_entropy(fn) -> str:
    """`fn(weights (..., Tq, Tk))` -> the mean over query rows of each row's entropy in
    nats, shape (...)."""
    gen = torch.Generator().manual_seed(0)
    masked = torch.softmax(torch.randn(2, 3, 5, generator=gen), dim=-1) * torch.tensor(
        [1.0, 1, 1, 0, 0]
    )
    cases = {
        "uniform rows over 4 keys": torch.full((3, 4), 0.25),
        "one-hot rows": torch.eye(4),
        "random rows of shape (2, 3, 4, 5)": torch.softmax(
            torch.randn(2, 3, 4, 5, generator=gen), dim=-1
        ),
        "rows with masked keys (weight 0)": masked / masked.sum(-1, keepdim=True),
    }
    for case, w in cases.items():
        got = result(case, learner_call(case, fn, w.clone()))
        if got.isnan().any():
            raise CheckFailed(
                f"{case}: NaN in your result: a weight of 0 adds 0 (0 log 0 = 0), not 0"
                " * -inf"
            )
        plogp = -(w * torch.where(w > 0, w, 1.0).log()).sum(-1)  # each row's entropy
        mistakes = {
            "entropy in nats uses the natural log, not log2": (
                plogp.mean(-1) / math.log(2)
            ),
            "the mean over query rows, not their sum": plogp.sum(-1) + 0.0,
        }
        named_mistake(case, got, plogp.mean(-1) + 0.0, mistakes)  # + 0.0: -0 -> 0
    return passed("attention entropy", cases)


def _leftmost_first(word: str, merges) -> list:
    """A usual mistake: merge the leftmost pair that is among the merges, whatever its
    rank."""
    known, pieces = set(merges), list(word)
    while True:
        at = next(
            (i for i, p in enumerate(zip(pieces, pieces[1:])) if p in known), None
        )
        if at is None:
            return pieces
        pieces[at : at + 2] = [pieces[at] + pieces[at + 1]]


def _first_only(word: str, merges) -> list:
    """A usual mistake: apply each merge in order, to the first place it fits only."""
    pieces = list(word)
    for a, b in merges:
        at = next(
            (i for i, p in enumerate(zip(pieces, pieces[1:])) if p == (a, b)), None
        )
        if at is not None:
            pieces[at : at + 2] = [a + b]
    return pieces


def check_encode_word(fn) -> str:
    """`fn(word, merges)` -> the word's pieces: merge the earliest-learned adjacent pair
    until none applies, against chapter 8b's `BPE(merges).encode_word`. `merges` is a
    list of (left, right) pairs, in the order they were learned; the word starts with
    the mark ▁."""
    from nmt_lib.subword import BPE, MARK  # chapter 8b's, imported where used

    cases = {
        f"{MARK}low with the merges (o, w) then (l, o)": (
            MARK + "low",
            [("o", "w"), ("l", "o")],
        ),
        f"{MARK}aaaa with the merge (a, a)": (MARK + "aaaa", [("a", "a")]),
        f"{MARK}lower with six merges": (
            MARK + "lower",
            [
                ("e", "r"),
                (MARK, "l"),
                ("l", "o"),
                ("o", "w"),
                ("w", "er"),
                (MARK + "l", "ow"),
            ],
        ),
        f"{MARK}xyz, which no merge touches": (MARK + "xyz", [("a", "b")]),
    }
    for case, (word, merges) in cases.items():
        got = learner_call(case, fn, word, list(merges))
        if not isinstance(got, (list, tuple)):
            raise CheckFailed(
                f"{case}: return the list of pieces, got {type(got).__name__}"
            )
        expected = BPE(merges).encode_word(word)
        if list(got) == expected:
            continue
        mistakes = {
            (
                "apply the earliest-learned merge first, wherever it is in the word, "
                "not the leftmost pair that has a merge"
            ): _leftmost_first(word, merges),
            (
                "keep merging until no adjacent pair is among the merges: a merge can "
                "apply more than once, and a later merge can make an earlier one "
                "apply"
            ): _first_only(word, merges),
        }
        for why, wrong in mistakes.items():
            if list(got) == wrong:
                raise CheckFailed(f"{case}: {why}")
        raise CheckFailed(f"{case}: got {list(got)}, expected {expected}")
    return passed("encode_word", cases)


def check_smoothed_loss(fn) -> str:
    """`fn(logits (N, V), target (N,), eps)` -> the mean label-smoothed cross-entropy, a
    scalar, against `F.cross_entropy(logits, target, label_smoothing=eps)`."""
    gen = torch.Generator().manual_seed(0)
    cases = [(4, 5, 0.0), (4, 5, 0.1), (7, 30, 0.25), (3, 2, 0.5)]
    for n, vocab, eps in cases:
        logits = torch.randn(n, vocab, generator=gen) * 3
        target = torch.randint(vocab, (n,), generator=gen)
        case = f"{n} tokens, V={vocab}, eps={eps}"
        logp = logits.log_softmax(-1)
        others = (1 - F.one_hot(target, vocab)) * eps / max(vocab - 1, 1) + F.one_hot(
            target, vocab
        ) * (1 - eps)
        mistakes = {
            (
                "the course (like PyTorch's label_smoothing and the paper) spreads "
                "eps over all V classes, the target included (it gets 1 - eps + eps / "
                "V); spreading it over the V - 1 others is another convention"
            ): (-(others * logp).sum(-1).mean()),
            "the mean over tokens, not the sum": F.cross_entropy(
                logits, target, label_smoothing=eps, reduction="sum"
            ),
            (
                "smoothing mixes in eps times the mean of -log p over all classes: "
                "you left it out"
            ): F.cross_entropy(logits, target),
        }
        named_mistake(
            case,
            learner_call(case, fn, logits.clone(), target.clone(), eps),
            F.cross_entropy(logits, target, label_smoothing=eps),
            mistakes,
        )
    return passed("label-smoothed loss", cases)


def check_sliced_loss(fn) -> str:
    """`fn(hidden (N, D), weight (V, D), bias (V,), targets (N,), rows)` -> the summed
    cross-entropy of `hidden @ weight.T + bias`, computed `rows` rows at a time, against
    `F.cross_entropy` on all rows. It checks the value and the gradient; whether the
    logits were really computed a slice at a time is the learner's to show (chapter 10
    measures the memory)."""
    gen = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(11, 6, generator=gen), torch.randn(11, generator=gen)
    targets = torch.randint(11, (10,), generator=gen)
    sizes = (1, 3, 10, 64)
    for rows in sizes:
        hidden = torch.randn(10, 6, generator=gen, requires_grad=True)
        logits = hidden @ weight.T + bias
        expected = F.cross_entropy(logits, targets, reduction="sum")
        (expected_grad,) = torch.autograd.grad(expected, hidden)
        case = f"rows={rows}"
        got = learner_call(case, fn, hidden, weight, bias, targets, rows)
        each = F.cross_entropy(logits, targets, reduction="none").detach()
        mistakes = {
            "sum the rows' losses (reduction='sum'), not their mean": each.mean(),
            "add each slice's sum, not its mean": sum(
                s.mean() for s in each.split(rows)
            ),
        }
        named_mistake(f"{case}: the loss", got, expected.detach(), mistakes, atol=1e-4)
        if not getattr(got, "requires_grad", False):
            raise CheckFailed(
                f"{case}: the loss has no gradient; keep it connected to `hidden`"
            )
        (grad,) = torch.autograd.grad(got, hidden)
        compare(
            f"{case}: the gradient with respect to hidden",
            grad,
            expected_grad,
            atol=1e-4,
        )
    return "sliced loss: right for rows = 1, 3, 10 and 64"


def _nucleus(logits, p, *, keep_crossing=True, renormalise=True, descending=True):
    """Top-p probabilities of (..., V) logits, or a usual mistake in them."""
    probs = logits.softmax(-1)
    sorted_p, order = probs.sort(-1, descending=descending)
    before = sorted_p.cumsum(-1) - sorted_p  # mass of the more likely tokens
    # the top token stays
    keep = before < p if keep_crossing else (sorted_p.cumsum(-1) <= p) | (before == 0)
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_p * keep)
    return kept / kept.sum(-1, keepdim=True) if renormalise else kept


def check_top_p(fn) -> str:
    """`fn(logits (..., V), p)` -> top-p (nucleus) sampling's probabilities (..., V):
    the smallest set of most likely tokens whose probability reaches p keeps its
    probabilities, renormalised to sum to 1; the rest get 0.
    """
    gen = torch.Generator().manual_seed(0)
    cases = {
        "6 tokens, p = 0.5": (torch.randn(6, generator=gen) * 2, 0.5),
        "6 tokens, p = 0.9": (torch.randn(6, generator=gen) * 2, 0.9),
        "a (2, 8) batch, p = 0.7": (torch.randn(2, 8, generator=gen) * 2, 0.7),
        "p = 1: every token stays": (torch.randn(5, generator=gen), 1.0),
    }
    for case, (logits, p) in cases.items():
        mistakes = {
            (
                "keep the token that takes the total to p or past it: the nucleus is "
                "the smallest set whose probability reaches p"
            ): _nucleus(logits, p, keep_crossing=False),
            "renormalise the kept probabilities so that they sum to 1": _nucleus(
                logits, p, renormalise=False
            ),
            "keep the most likely tokens: sort the probabilities in descending order": (
                _nucleus(logits, p, descending=False)
            ),
        }
        got = result(case, learner_call(case, fn, logits.clone(), p))
        if got.isnan().any():
            raise CheckFailed(
                f"{case}: NaN in your result: keep the token that takes the total to p"
                " or past it, so that at least the most likely token stays"
            )
        named_mistake(case, got, _nucleus(logits, p), mistakes)
    return passed("top-p", cases)
