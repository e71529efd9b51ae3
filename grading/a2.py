"""The hidden cases of assignment 2, for the teacher: other logits, dtypes, penalties,
models and sources than the public grader's, compared with references built from chapter
7's model interface and chapter 8's beam tree."""

import torch

from nmt_lib.checks.a2 import random_translator, sources, token_lists
from nmt_lib.checks.core import CheckFailed, compare, learner_call


def _penalty_reference(logits, generated, penalty):
    before = logits.gather(1, generated)
    return logits.scatter(
        1, generated, torch.where(before > 0, before / penalty, before * penalty)
    )


def repetition_penalty(fn):
    gen = torch.Generator().manual_seed(2026)
    logits = torch.randn(4, 50, generator=gen, dtype=torch.float64)
    generated = torch.randint(0, 50, (4, 12), generator=gen)
    for penalty in (1.2, 0.5):
        case = (
            "float64 logits over 50 tokens, 12 generated with repeats, penalty"
            f" {penalty}"
        )
        got = learner_call(case, fn, logits.clone(), generated.clone(), penalty)
        compare(case, got, _penalty_reference(logits, generated, penalty))
        if torch.as_tensor(got).dtype != torch.float64:
            raise CheckFailed(
                f"{case}: the logits should keep their dtype torch.float64"
            )


@torch.no_grad()
def _greedy_reference(model, src, src_len, *, bos_id, eos_id, max_len, penalty):
    out = []
    for i in range(src.shape[0]):
        state, tokens = model.encode(src[i : i + 1], src_len[i : i + 1]), []
        step = torch.tensor([[bos_id]])
        for _ in range(max_len):
            logits, state, _ = model.step(step, state)
            generated = torch.tensor([tokens], dtype=torch.long)
            token = int(
                _penalty_reference(logits[:, -1], generated, penalty).argmax(-1)
            )
            if token == eos_id:
                break
            tokens.append(token)
            step = torch.tensor([[token]])
        out.append(tokens)
    return out


def penalised_greedy(fn, penalty_fn):
    model = random_translator(3, vocab=20)
    src, src_len = sources(3, (7, 2, 9, 4), vocab=20)
    for penalty, max_len in ((1.8, 10), (0.7, 10), (1.5, 2)):
        ids = dict(bos_id=1, eos_id=2, max_len=max_len, penalty=penalty)
        case = f"4 sentences, 20 tokens, penalty {penalty}, max_len {max_len}"
        got = token_lists(case, learner_call(case, fn, model, src, src_len, **ids), 4)
        expected = _greedy_reference(model, src, src_len, **ids)
        if got != expected:
            raise CheckFailed(f"{case}: got {got}, expected {expected}")


def _n_best_reference(model, src, src_len, *, beam_size, n, alpha, **ids):
    from nmt_lib.decoding import cut_at_eos
    from nmt_lib.evaluation import beam_trace, trace_path

    out, eos = [], ids["eos_id"]
    for i in range(src.shape[0]):
        _, nodes = beam_trace(
            model,
            src[i, : int(src_len[i])].tolist(),
            beam_size=beam_size,
            alpha=alpha,
            **ids,
        )
        final = sorted(
            (node for node in nodes if node.get("final")),
            key=lambda node: -node["score"],
        )
        path = lambda node: trace_path(nodes, nodes.index(node))[1:]
        out.append([(cut_at_eos(path(nd), eos)[0], nd["score"]) for nd in final[:n]])
    return out


def n_best(fn):
    model = random_translator(4, vocab=20)
    src, src_len = sources(4, (6, 3, 8), vocab=20)
    for beam, n, alpha in ((5, 5, 0.6), (2, 2, 1.0)):
        ids = dict(bos_id=1, eos_id=2, max_len=9)
        case = f"beam {beam}, n {n}, alpha {alpha:g}, 3 sentences over 20 tokens"
        search = dict(beam_size=beam, n=n, alpha=alpha, **ids)
        got = learner_call(case, fn, model, src, src_len, **search)
        expected = _n_best_reference(model, src, src_len, **search)
        for i, (mine, right) in enumerate(zip(got, expected)):
            if [[int(t) for t in tokens] for tokens, _ in mine] != [
                tokens for tokens, _ in right
            ]:
                raise CheckFailed(
                    f"{case}: sentence {i}: got {[list(t) for t, _ in mine]}, expected "
                    f"{[t for t, _ in right]}"
                )
            compare(
                f"{case}: sentence {i}, the scores",
                [float(s) for _, s in mine],
                [s for _, s in right],
                atol=1e-4,
            )
