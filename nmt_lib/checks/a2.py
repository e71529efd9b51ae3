"""The public graders of assignment 2, decoding with a repetition penalty and the n
best: the penalty, greedy decoding with it, and an n-best beam search, each checked
against chapter 7's decoding where the two must agree and against properties that
define the task elsewhere, on a small untrained Transformer (`random_translator`); the
teacher's hidden cases compare every value (`grading/a2.py`)."""

import torch

from nmt_lib.checks.core import CheckFailed, compare, learner_call, passed, result


def check_repetition_penalty(fn) -> str:
    """`fn(logits (B, V), generated (B, t), penalty)` -> new logits, checked against
    what task 1 states: only the logits of a row's generated tokens change, each once
    however often it occurs, by scaling with `penalty`, and with `penalty` > 1 each
    becomes less likely. A failure names the case and the property, not the logits
    expected (the teacher's hidden cases compare them).
    """
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0, -2.0], [1.0, 1.0, -0.5, 0.0, 4.0]])
    cases = {
        "one token each": (torch.tensor([[3], [2]]), 2.0),
        "a token generated twice is penalised once": (torch.tensor([[0, 0, 1]]), 2.0),
        "each row its own tokens": (torch.tensor([[4, 2], [0, 4]]), 1.5),
        "penalty 1 changes nothing": (torch.tensor([[0, 1], [2, 3]]), 1.0),
        "nothing generated yet": (torch.zeros(2, 0, dtype=torch.long), 3.0),
    }
    for case, (generated, penalty) in cases.items():
        rows = logits[: generated.shape[0]]
        before = rows.clone()
        got = result(case, learner_call(case, fn, rows, generated, penalty))
        if not torch.equal(rows, before):
            raise CheckFailed(
                f"{case}: your function changed the logits it was given; return new"
                " ones"
            )
        if tuple(got.shape) != tuple(before.shape):
            raise CheckFailed(
                f"{case}: wrong shape {tuple(got.shape)}, expected"
                f" {tuple(before.shape)}"
            )
        written = torch.zeros_like(before, dtype=torch.bool).scatter(1, generated, True)
        compare(
            f"{case}: a token not generated changed",
            got,
            torch.where(written, got, before),
            show=False,
        )
        old, new = before[written].double(), got[written].double()
        close = dict(atol=1e-6, rtol=1e-5)
        if not (
            torch.isclose(new, old * penalty, **close)
            | torch.isclose(new, old / penalty, **close)
        ).all():
            raise CheckFailed(
                f"{case}: a generated token's logit is not its logit scaled once by the"
                " penalty"
            )
        if penalty > 1 and (new > old).any():
            sign = "negative" if (old[new > old] < 0).any() else "positive"
            raise CheckFailed(
                f"{case}: a {sign} logit went up, making a repeated token more likely"
            )
    return passed("repetition penalty", cases)


def random_translator(seed: int = 0, *, vocab: int = 12, sharp: float = 8.0):
    """A small untrained Transformer whose output layer is scaled by `sharp`, so that
    its choices are far from ties; in eval mode. Tokens: 0 <pad>, 1 <bos>, 2 <eos>."""
    from nmt_lib.transformer import Transformer, TransformerConfig

    torch.manual_seed(seed)
    model = Transformer(
        TransformerConfig(
            vocab, vocab, d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0
        )
    )
    with torch.no_grad():
        model.decoder.dense.weight.mul_(sharp)
    return model.eval()


def sources(seed: int = 0, lengths=(5, 3, 6), vocab: int = 12):
    """A padded (B, S) batch of random source ids (3 .. vocab - 1) of the given lengths,
    and the lengths."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for i, n in enumerate(lengths):
        src[i, :n] = torch.randint(3, vocab, (n,), generator=gen)
    return src, torch.tensor(lengths)


def token_lists(case: str, got, batch: int) -> list:
    if not isinstance(got, (list, tuple)) or len(got) != batch:
        raise CheckFailed(
            f"{case}: return one token list per sentence ({batch}), got"
            f" {type(got).__name__}"
        )
    return [[int(t) for t in seq] for seq in got]


def check_penalised_greedy(fn, penalty_fn) -> str:
    """`fn(model, src, src_len, *, bos_id, eos_id, max_len, penalty)` -> per sentence
    the greedy tokens (no <bos>, cut before <eos>), each step choosing the most likely
    token after `penalty_fn` (the learner's task 1) has penalised the sentence's tokens
    so far. With penalty 1 it is chapter 7's `greedy_decode`.
    """
    from nmt_lib.decoding import greedy_decode  # chapter 7's

    model, (src, src_len) = random_translator(), sources()
    ids = dict(bos_id=1, eos_id=2, max_len=8)
    plain = greedy_decode(model, src, src_len, **ids).tokens
    case = "penalty 1: chapter 7's greedy_decode"
    got = token_lists(
        case, learner_call(case, fn, model, src, src_len, **ids, penalty=1.0), 3
    )
    if got != plain:
        raise CheckFailed(f"{case}: got {got}, expected {plain}")
    case = "penalty 3, three sentences"
    batch = token_lists(
        case, learner_call(case, fn, model, src, src_len, **ids, penalty=3.0), 3
    )
    for i, tokens in enumerate(batch):
        alone, row = f"sentence {i} alone", slice(i, i + 1)
        own = src[row, : int(src_len[i])], src_len[row]
        one = learner_call(alone, fn, model, *own, **ids, penalty=3.0)
        one = token_lists(alone, one, 1)[0]
        if one != tokens:
            raise CheckFailed(
                f"penalty 3: sentence {i} alone gives {one}, in the batch {tokens}:"
                " penalise each sentence's own tokens only"
            )
        prefix = [1] + tokens
        with torch.no_grad():
            logits = model(src[row], src_len[row], torch.tensor([prefix]))[0]  # (T, V)
        for t in range(len(tokens) + (len(tokens) < ids["max_len"])):
            step = learner_call(
                "your repetition_penalty",
                penalty_fn,
                logits[t : t + 1].clone(),
                torch.tensor([tokens[:t]], dtype=torch.long),
                3.0,
            )
            choice = int(result("your repetition_penalty", step).argmax(-1))
            wanted = tokens[t] if t < len(tokens) else 2
            if choice != wanted:
                raise CheckFailed(
                    f"{case}: sentence {i}, step {t + 1}: the penalised logits (your"
                    f" task 1) pick token {choice}, your decoding chose {wanted}"
                )
    if batch == plain:
        raise CheckFailed(
            f"{case}: the same tokens as without a penalty: the penalty was not applied"
        )
    return passed("greedy decoding with a repetition penalty", ["penalty 1", *range(3)])


def check_n_best(fn) -> str:
    """`fn(model, src, src_len, *, bos_id, eos_id, beam_size, n, max_len, alpha)` -> per
    sentence a list of n (tokens, score) pairs, best first: the n best of the final
    beams of chapter 7's beam search, each with the score by which that search ranks
    its final beams (chapter 8's `sequence_scores`)."""
    from nmt_lib.decoding import beam_search  # chapter 7's
    from nmt_lib.evaluation import sequence_scores  # chapter 8's

    model, (src, src_len) = random_translator(1), sources(1)
    for beam, n, alpha in ((4, 1, 1.0), (4, 3, 1.0), (3, 3, 0.0)):
        case = f"beam {beam}, n {n}, alpha {alpha:g}"
        ids = dict(bos_id=1, eos_id=2, max_len=8)
        got = learner_call(
            case, fn, model, src, src_len, **ids, beam_size=beam, n=n, alpha=alpha
        )
        if not isinstance(got, (list, tuple)) or len(got) != 3:
            raise CheckFailed(
                f"{case}: return one list per sentence (3), got {type(got).__name__}"
            )
        best = beam_search(
            model, src, src_len, **ids, beam_size=beam, alpha=alpha
        ).tokens
        for i, hyps in enumerate(got):
            if (
                not isinstance(hyps, (list, tuple))
                or len(hyps) != n
                or not all(len(h) == 2 for h in hyps)
            ):
                raise CheckFailed(
                    f"{case}: sentence {i}: return a list of n = {n} (tokens, score)"
                    " pairs"
                )
            tokens = [[int(t) for t in h[0]] for h in hyps]
            scores = [float(h[1]) for h in hyps]
            if tokens[0] != best[i]:
                raise CheckFailed(
                    f"{case}: sentence {i}: your best is {tokens[0]}, chapter 7's beam"
                    f" search returns {best[i]}"
                )
            if (
                scores != sorted(scores, reverse=True)
                or len({tuple(t) for t in tokens}) < n
            ):
                raise CheckFailed(
                    f"{case}: sentence {i}: the list should be n different"
                    " translations, best first"
                )
            expected = sequence_scores(
                model,
                src[i : i + 1].expand(n, -1),
                src_len[i : i + 1].expand(n),
                [(t, len(t) < ids["max_len"]) for t in tokens],
                **{k: ids[k] for k in ("bos_id", "eos_id")},
                alpha=alpha,
            )
            compare(
                f"{case}: sentence {i}, the scores against chapter 8's sequence_scores",
                scores,
                expected,
                atol=1e-4,
            )
    case = "n = 3 from a beam of 2"
    try:
        fn(model, src, src_len, **ids, beam_size=2, n=3, alpha=1.0)
    except ValueError:
        pass
    except Exception as e:
        raise CheckFailed(
            f"{case}: raise a ValueError that says why, not {type(e).__name__}"
        ) from None
    else:
        raise CheckFailed(
            f"{case}: raise a ValueError that says why (the beam holds 2 translations)"
        )
    return passed("n-best beam search", range(4))
