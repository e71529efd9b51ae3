"""What every grader shares: the one-sentence failure, comparing results, calling a
learner's code so that its exception becomes a case, and naming a known mistake when a
wrong result matches it.
"""

import traceback

import torch


class CheckFailed(AssertionError):
    """What a learner's implementation got wrong, in one sentence."""


def compare(what: str, got, expected, *, atol: float = 1e-5, show: bool = True):
    """Raise `CheckFailed` unless `got` has the shape and, within `atol`, the values of
    `expected`; `show=False` leaves the expected value out of the sentence (an
    assignment's grader, where it would give away the rule a task asks for)."""
    got, expected = result(what, got).cpu(), torch.as_tensor(expected).detach().cpu()
    if tuple(got.shape) != tuple(expected.shape):
        raise CheckFailed(
            f"{what}: wrong shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
        )
    # NaN is never close
    bad = ~torch.isclose(got.double(), expected.double(), atol=atol, rtol=1e-4)
    if bad.any():
        where = tuple(int(i) for i in bad.nonzero()[0])
        at = f" at position {where}" if where else ""
        wanted = f", expected {expected[where].item():.4g}" if show else ""
        raise CheckFailed(
            f"{what}: wrong value{at}: got {got[where].item():.4g}{wanted}"
        )


def result(what: str, got) -> torch.Tensor:
    """A learner's result as a tensor (detached), or `CheckFailed` saying what came back
    instead (a function without `return` gives None)."""
    try:
        return torch.as_tensor(got).detach()
    except (TypeError, ValueError, RuntimeError):
        raise CheckFailed(
            f"{what}: return a tensor (or numbers), got {type(got).__name__}"
        ) from None


LIBRARY = ("site-packages", "dist-packages", "nmt_lib")


def learner_call(case: str, fn, *args, **kwargs):
    """`fn(*args, **kwargs)`; an exception raised in the learner's code becomes
    `CheckFailed` naming `case`, the exception, and the learner's line that raised
    it."""
    try:
        return fn(*args, **kwargs)
    except CheckFailed:
        raise
    except Exception as e:
        frames = [
            f.line
            for f in traceback.extract_tb(e.__traceback__)[1:]
            if not any(part in f.filename for part in LIBRARY) and f.line
        ]
        # one raised in a grading sandbox
        mine = getattr(e, "learner_line", frames[-1] if frames else "")
        line = f" (your line: {mine.strip()})" if mine else ""
        first = (str(e).strip().splitlines() or [""])[0]
        raise CheckFailed(
            f"{case}: your code raised {type(e).__name__}: {first}{line}"
        ) from None


def same(a, b, *, atol: float = 1e-5) -> bool:
    """Whether two tensors have one shape and, within `atol`, the same values."""
    a, b = torch.as_tensor(a).detach().cpu(), torch.as_tensor(b).detach().cpu()
    return tuple(a.shape) == tuple(b.shape) and torch.allclose(
        a.double(), b.double(), atol=atol, rtol=1e-4
    )


def named_mistake(case: str, got, expected, mistakes: dict, *, atol: float = 1e-5):
    """Raise `CheckFailed` naming the first known mistake (`{why: wrong result}`, or
    (why, wrong) pairs) that `got` matches, when it is not `expected`; then `compare` it
    with `expected`."""
    mistakes = mistakes.items() if isinstance(mistakes, dict) else mistakes
    got = result(case, got)
    if not same(got, expected, atol=atol):
        for why, wrong in mistakes:
            if same(got, wrong, atol=atol):
                raise CheckFailed(f"{case}: {why}")
    compare(case, got, expected, atol=atol)


def parts(case: str, got, names: tuple):
    """`got` as a tuple of len(names) results, or `CheckFailed` saying what the function
    should return."""
    if not isinstance(got, (tuple, list)) or len(got) != len(names):
        what = (
            f"{type(got).__name__} of length {len(got)}"
            if isinstance(got, (tuple, list))
            else type(got).__name__
        )
        raise CheckFailed(f"{case}: return ({', '.join(names)}), got {what}")
    return tuple(got)


def gradients_of(case: str, mine, inputs, weights, parameters=(), *args):
    """The gradients of sum(mine(*inputs, *args)[0 if a pair] * weights) with respect to
    `inputs` and `mine`'s named `parameters` (None where none reaches), computed where
    `mine` runs: here, or in the kernel of a submission graded apart (whose modules
    offer `gradients`)."""
    if hasattr(mine, "gradients"):
        return learner_call(
            case, mine.gradients, list(inputs), weights, list(parameters), *args
        )
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = learner_call(case, mine, *leaves, *args)
    out = out[0] if isinstance(out, (tuple, list)) else out
    if not torch.as_tensor(out).requires_grad:
        raise CheckFailed(f"{case}: your output has no gradient: keep it in autograd")
    wrt = leaves + [mine.get_parameter(name) for name in parameters]
    return list(torch.autograd.grad((out * weights).sum(), wrt, allow_unused=True))


def passed(what: str, cases) -> str:
    """The message of a grader that found nothing wrong."""
    return f"{what}: right in all {len(cases)} cases"


def run_check(grader, *answers) -> str:
    """What `grader(*answers)` says, as one line that an assignment prints: 'passed:
    ...' or 'not yet: ...' (the grader's sentence), so that an unfinished task never
    stops the notebook."""
    try:
        return f"passed: {grader(*answers)}"
    except CheckFailed as e:
        return f"not yet: {e}"
