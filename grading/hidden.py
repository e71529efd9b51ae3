"""The hidden tests of the three assignments, for the teacher (left out of the student edition).

Each task is scored in two parts: the public grader the assignment notebook already shows the student
(`nmt_lib.checks`), and hidden cases the student has not seen (other sizes, seeds, mask shapes, gradients).
`grade(assignment, namespace)` takes the names a submission defined and returns one row per task: points
earned, points possible, and the messages. `tools/grade.py` runs a submission and calls it.
"""
import functools
import importlib
import inspect
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import torch

from nmt_lib.checks import (CheckFailed, check_attention, check_beam_step, check_decoder_block, check_kv_cache_step,
                            check_masked_softmax, check_multihead, compare, learner_call)
from nmt_lib.checks.core import parts
from nmt_lib.checks.transformer import load_course_weights, output_of


@dataclass(frozen=True)
class Task:
    name: str            # what the student writes, as the assignment names it
    needs: str           # the name the submission must define
    public: Callable     # the public grader, given the defined object
    hidden: Callable     # hidden cases, given the defined object; raises CheckFailed
    points: int = 10
    own: bool = True     # a function or class the student writes (not one imported from the course)
    course: tuple = ()   # the course's (and PyTorch's) own implementations of the task, by dotted name


def _hidden_masked_softmax(fn):
    from nmt_lib.attention import masked_softmax
    gen = torch.Generator().manual_seed(2026)
    cases = {"5-D scores with a (B, 1, 1, 1, Tk) mask": (torch.randn(2, 2, 3, 4, 6, generator=gen),
                                                          torch.rand(2, 1, 1, 1, 6, generator=gen) > 0.4),
             "float64 scores with a (Tq, Tk) mask": (torch.randn(3, 5, 5, generator=gen, dtype=torch.float64),
                                                    torch.ones(5, 5, dtype=torch.bool).tril()),
             "every key masked": (torch.randn(2, 3, 4, generator=gen), torch.zeros(2, 1, 4, dtype=torch.bool))}
    for case, (scores, mask) in cases.items():
        got = learner_call(case, fn, scores.clone(), mask.clone())
        compare(case, got, masked_softmax(scores, mask=mask))
        if torch.as_tensor(got).dtype != scores.dtype:
            raise CheckFailed(f"{case}: the weights should keep the scores' dtype {scores.dtype}")


def _hidden_attention(fn):
    from nmt_lib.attention import attend
    gen = torch.Generator().manual_seed(2026)
    q = torch.randn(3, 2, 4, 32, generator=gen, requires_grad=True)
    k = torch.randn(3, 2, 7, 32, generator=gen, requires_grad=True)
    v = torch.randn(3, 2, 7, 5, generator=gen, requires_grad=True)
    mask = torch.rand(3, 1, 4, 7, generator=gen) > 0.3
    out, w = parts("(B, H, Tq, d) queries", learner_call("(B, H, Tq, d) queries with a (B, 1, Tq, Tk) mask", fn,
                                                           q, k, v, mask), ("output", "weights"))
    expected, expected_w = attend(q, k, v, mask, need_weights=True)
    compare("(B, H, Tq, d) queries with a (B, 1, Tq, Tk) mask, the weights", w, expected_w)
    compare("(B, H, Tq, d) queries with a (B, 1, Tq, Tk) mask, the output", out, expected)
    g = torch.randn(expected.shape, generator=gen)
    if not out.requires_grad:
        raise CheckFailed("the output has no gradient: keep it in autograd")
    found = torch.autograd.grad((out * g).sum(), (q, k, v), allow_unused=True)
    for name, f, w in zip(("queries", "keys", "values"), found, torch.autograd.grad((expected * g).sum(), (q, k, v))):
        if f is None:
            raise CheckFailed(f"no gradient reaches the {name}")
        compare(f"the gradient with respect to the {name}", f, w, atol=1e-4)


def _hidden_multihead(cls):
    from nmt_lib.multihead import MultiHeadAttention
    gen = torch.Generator().manual_seed(2026)
    for d, h in ((32, 8), (12, 1)):
        torch.manual_seed(d)
        course = MultiHeadAttention(d, h).eval()
        mine = learner_call(f"cls({d}, {h})", cls, d, h)
        load_course_weights(f"cls({d}, {h})", mine, course)
        x, mem = torch.randn(1, 9, d, generator=gen), torch.randn(1, 4, d, generator=gen)
        mask = torch.tensor([[[True, True, False, False]]])
        got = output_of(learner_call(f"cls({d}, {h}) over a padded source", mine, x, mem, mem, mask))
        compare(f"cls({d}, {h}) over a padded source", got, course(x, mem, mem, mask))


def _hidden_decoder_block(cls):
    from nmt_lib.attention import lens_to_mask
    gen = torch.Generator().manual_seed(2026)
    torch.manual_seed(3)
    block = learner_call("cls(32, 8, 64)", cls, 32, 8, 64).eval()
    x, mem = torch.randn(3, 11, 32, generator=gen), torch.randn(3, 5, 32, generator=gen)
    out = output_of(learner_call("11 target tokens, batch 3", block, x, mem, lens_to_mask([5, 1, 3], 5)))
    if tuple(out.shape) != (3, 11, 32) or not torch.isfinite(out).all():
        raise CheckFailed(f"11 target tokens, batch 3: expected finite (3, 11, 32), got {tuple(out.shape)}")
    later = x.clone()
    later[:, 6:] = torch.randn(3, 5, 32, generator=gen)
    moved = output_of(learner_call("tokens 6-10 changed", block, later, mem, lens_to_mask([5, 1, 3], 5)))
    compare("positions 0-5 when tokens 6-10 change", moved[:, :6], out[:, :6])


def _hidden_kv_step(fn):
    from nmt_lib.multihead import MultiHeadAttention
    torch.manual_seed(5)
    attn = MultiHeadAttention(24, 8).eval()
    gen = torch.Generator().manual_seed(2026)
    ys = torch.randn(3, 7, 24, generator=gen)
    with torch.no_grad():
        full = attn(ys, ys, ys, torch.ones(7, 7, dtype=torch.bool).tril())
        k = v = None
        for t in range(7):
            out, k, v = parts(f"step {t + 1} of 7", learner_call(f"step {t + 1} of 7, 8 heads", fn, attn,
                                                                 ys[:, t : t + 1], k, v), ("output", "k", "v"))
            compare(f"step {t + 1} of 7, 8 heads", out, full[:, t : t + 1])


def _hidden_beam_step(fn):
    from nmt_lib.decoding import beam_step
    gen = torch.Generator().manual_seed(2026)
    logp = torch.randn(3, 4, 10, generator=gen).log_softmax(-1)
    scores = torch.randn(3, 4, generator=gen).sort(-1, descending=True).values
    finished = torch.rand(3, 4, generator=gen) > 0.6
    got = parts("4 beams over 10 tokens", learner_call("4 beams over 10 tokens, <eos> = 7", fn, scores, logp,
                                                      finished, 7), ("scores", "beam", "token"))
    for name, g, e in zip(("scores", "beam", "token"), got, beam_step(scores, logp, finished, 7)):
        compare(f"4 beams over 10 tokens, <eos> = 7, {name}", g, e)


BLEU_TO_BEAT = 25.0       # A3: greedy BLEU on the held-out test split of chapter_data(), learner mode
TRAINED = 5.0             # A3's public half: a validation BLEU that no untrained model reaches


def _bleu(model, split: str) -> float:
    from nmt_lib.decoding import evaluate_bleu
    from nmt_lib.recipes import chapter_data
    data = chapter_data()
    model.eval()
    return evaluate_bleu(model, getattr(data.splits, split), data.src_vocab, data.tgt_vocab, max_len=30).bleu


def _public_bleu(model):
    """A3's public part: a trained model, that is one that translates the validation split at all."""
    if not isinstance(model, torch.nn.Module):
        raise CheckFailed(f"`model` should be a trained nn.Module, got {type(model).__name__}")
    bleu = learner_call("translating the validation split", _bleu, model, "valid")
    if not bleu > TRAINED:
        raise CheckFailed(f"validation BLEU {bleu:.1f}: not a trained model yet (above {TRAINED} expected)")
    return f"a trained model: validation BLEU {bleu:.1f}"


def _hidden_bleu(model):
    bleu = learner_call("translating the test split", _bleu, model, "test")
    if not bleu > BLEU_TO_BEAT:
        raise CheckFailed(f"greedy BLEU on the held-out test split is {bleu:.1f}, not above {BLEU_TO_BEAT}")
    return f"greedy BLEU on the held-out test split {bleu:.1f}, above {BLEU_TO_BEAT:g}"


ASSIGNMENTS = {
    "A1": [Task("the masked softmax", "masked_softmax", check_masked_softmax, _hidden_masked_softmax,
                course=("nmt_lib.attention.masked_softmax",)),
           Task("scaled dot-product attention", "attention", check_attention, _hidden_attention,
                course=("nmt_lib.attention.attend", "nmt_lib.attention.DotProductAttention",
                        "torch.nn.functional.scaled_dot_product_attention")),
           Task("multi-head attention", "MyMultiHeadAttention", check_multihead, _hidden_multihead,
                course=("nmt_lib.multihead.MultiHeadAttention", "torch.nn.MultiheadAttention",
                        "nmt_lib.attention.attend", "nmt_lib.attention.DotProductAttention"))],
    "A2": [Task("a pre-norm decoder block", "MyDecoderBlock", check_decoder_block, _hidden_decoder_block,
                course=("nmt_lib.transformer.DecoderBlock", "nmt_lib.transformer.Block",
                        "torch.nn.TransformerDecoderLayer")),
           Task("one KV-cache step", "kv_step", check_kv_cache_step, _hidden_kv_step,
                course=("nmt_lib.transformer.cached_self_attention",)),
           Task("one beam-search step", "beam_step", check_beam_step, _hidden_beam_step,
                course=("nmt_lib.decoding.beam_step",))],
    "A3": [Task("a model that beats the stated BLEU", "model", _public_bleu, _hidden_bleu, points=30, own=False)],
}


def _resolve(dotted: str):
    module, name = dotted.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


COURSE = ("nmt_lib", "torch", "d2l")  # the packages whose objects are not the student's own
_hiding = [0]  # how deep in the submission's guarded code we are: the course is hidden while above 0


@contextmanager
def _course_hidden(task: Task, scopes: list):
    """While the submission's code for `task` runs, every reference to the course's own implementations of the
    task (in the course's modules, their defining modules and the submission's `scopes`, its globals) answers
    with a stub that fails the task and says why; restored afterwards."""
    _hiding[0] += 1
    swaps = []
    if _hiding[0] == 1:
        for dotted in task.course:
            original = _resolve(dotted)

            def stub(*args, _dotted=dotted, **kwargs):
                raise CheckFailed(f"`{task.needs}` uses the course's {_dotted}, which this task asks you to "
                                  "write yourself")
            homes = {dotted.rsplit(".", 1)[0]} | {n for n in sys.modules if n.split(".")[0] == "nmt_lib"}
            for holder in [vars(sys.modules[n]) for n in homes if sys.modules.get(n)] + scopes:
                for key, value in list(holder.items()):
                    if value is original:
                        swaps.append((holder, key, value))
                        holder[key] = stub
    try:
        yield
    finally:
        for holder, key, value in reversed(swaps):
            holder[key] = value
        _hiding[0] -= 1


def _guarded(task: Task, obj, namespace: dict):
    """`obj` whose own code (the function, or the methods its classes define) runs with the course hidden."""
    def guard(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with _course_hidden(task, [namespace, fn.__globals__]):
                return fn(*args, **kwargs)
        return run
    if not task.course:
        return obj
    if inspect.isfunction(obj):
        return guard(obj)
    if not isinstance(obj, type):
        return obj
    own = {name: guard(f) for klass in reversed(obj.__mro__) if klass.__module__.split(".")[0] not in COURSE
           for name, f in vars(klass).items() if inspect.isfunction(f)}
    return type(obj.__name__, (obj,), {**own, "__module__": obj.__module__, "__qualname__": obj.__qualname__})


def grade(assignment: str, namespace: dict) -> list[dict]:
    """One row per task: {task, points, out_of, messages}. Half the points for the public grader, half for
    the hidden cases; a task whose name the submission does not define scores 0."""
    rows = []
    for task in ASSIGNMENTS[assignment]:
        row = {"task": task.name, "points": 0.0, "out_of": task.points, "messages": []}
        obj = namespace.get(task.needs)
        origin = getattr(obj, "__module__", "__main__")
        if task.needs not in namespace:
            row["messages"].append(f"`{task.needs}` is not defined: run the cell that defines it, or name it so")
        elif obj is None:
            row["messages"].append(f"`{task.needs}` is still None: the task is not done")
        elif task.own and str(origin).split(".")[0] in COURSE:
            row["messages"].append(f"`{task.needs}` comes from {origin}: write your own")
        elif isinstance(obj, type) and (base := next((c for c in task.course if isinstance(k := _resolve(c), type)
                                                      and issubclass(obj, k)), None)):
            row["messages"].append(f"`{task.needs}` subclasses the course's {base}: write your own")
        else:
            for part, check in (("public", task.public), ("hidden", task.hidden)):
                try:
                    message = check(_guarded(task, obj, namespace))
                    row["points"] += task.points / 2
                    row["messages"].append(f"{part}: {message or 'all hidden cases passed'}")
                except CheckFailed as e:
                    row["messages"].append(f"{part}: {e}")
                except Exception as e:                   # a grader's own failure must not stop the others
                    row["messages"].append(f"{part}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        rows.append(row)
    return rows


