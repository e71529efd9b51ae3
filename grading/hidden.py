"""The hidden tests of the three assignments, for the teacher (not in the student
edition): each assignment's tasks, their points, and how a submission is scored: half
by the public grader the student sees (`nmt_lib.checks`), half by hidden cases (other
sizes, seeds, masks, gradients: `grading/a1.py`, `a2.py`, `a3.py`).
"""

import functools
from dataclasses import dataclass
from typing import Callable

from grading import a1, a2, a3
from nmt_lib.checks import CheckFailed, check_alibi_bias, check_beats_reference
from nmt_lib.checks import check_local_attention, check_n_best, check_penalised_greedy
from nmt_lib.checks import check_repetition_penalty, check_window_mask
from nmt_lib.checks.a3 import RUNS, find_runs


@dataclass(frozen=True)
class Task:
    name: str  # what the student writes, as the assignment names it
    # the names the submission must define; the graders are given their objects
    needs: tuple
    public: Callable  # the public grader, given the defined objects
    hidden: Callable  # hidden cases, given the defined objects; raises CheckFailed
    points: int = 10
    # functions or classes the student writes (not ones imported from the course)
    own: bool = True
    # the graders are given the runs handed in (A3's hand-in/) before the names
    runs: bool = False


ASSIGNMENTS = {
    "A1": [
        Task(
            "a sliding-window mask",
            ("sliding_window_mask",),
            check_window_mask,
            a1.window_mask,
        ),
        Task("the ALiBi bias", ("alibi_bias",), check_alibi_bias, a1.alibi_bias),
        Task(
            "multi-head attention with ALiBi and a window",
            ("MyLocalAttention",),
            check_local_attention,
            a1.local_attention,
        ),
    ],
    "A2": [
        Task(
            "a repetition penalty",
            ("repetition_penalty",),
            check_repetition_penalty,
            a2.repetition_penalty,
        ),
        Task(
            "greedy decoding with the penalty",
            ("greedy_with_penalty", "repetition_penalty"),
            check_penalised_greedy,
            a2.penalised_greedy,
        ),
        Task("the n best of beam search", ("n_best",), check_n_best, a2.n_best),
    ],
    "A3": [
        Task(
            "beat the reference",
            ("chosen",),
            check_beats_reference,
            a3.beats_reference,
            own=False,
            runs=True,
        ),
        Task(
            "the ablation table",
            ("ablation", "chosen"),
            a3.public_ablation,
            a3.ablation,
            points=20,
            own=False,
            runs=True,
        ),
    ],
}


# the packages whose objects are not the student's own
COURSE = ("nmt_lib", "torch", "d2l")


def _refusal(task: Task, name: str, about: dict, errors=()) -> str | None:
    """Why the submission's `name` cannot be graded for `task` (not defined, None, or
    the course's own), or None. `about` as the sandbox's `describe` gives it."""
    if not about["defined"]:
        cells = f" (its cells raised {'; '.join(errors)})" if errors else ""
        return (
            f"`{name}` is not defined: run the cell that defines it, or name it"
            f" so{cells}"
        )
    if about["none"]:
        return f"`{name}` is still None: the task is not done"
    if task.own and about["module"].split(".")[0] in COURSE:
        return f"`{name}` comes from {about['module']}: write your own"
    return None


# The right letters of each assignment's concept questions, in order (the reasons are
# in the model answers).
CONCEPT_KEYS = {"A1": "cbda", "A2": "dbac", "A3": "bcad"}
CONCEPT_POINTS = 2  # a right letter


def parts(assignment: str) -> list[tuple[str, int]]:
    """(name, points possible) of each row `grade` gives for `assignment`."""
    concepts = ("concept questions", CONCEPT_POINTS * len(CONCEPT_KEYS[assignment]))
    return [(task.name, task.points) for task in ASSIGNMENTS[assignment]] + [concepts]


def grade_cells(assignment: str) -> list[str]:
    """The nbgrader grade cell where `make grade` writes each row's points."""
    tasks = [
        f"{assignment}-points-{i}" for i in range(1, len(ASSIGNMENTS[assignment]) + 1)
    ]
    return tasks + [f"{assignment}-concepts"]


def grade_concepts(assignment: str, namespace: dict) -> dict:
    """The concept questions' row: CONCEPT_POINTS a right letter in `my_answers` (a
    plain dict of strings: an object equal to every letter scores nothing)."""
    key, answers = CONCEPT_KEYS[assignment], namespace.get("my_answers")
    row = {
        "task": "concept questions",
        "points": 0.0,
        "out_of": CONCEPT_POINTS * len(key),
        "messages": [],
    }
    if type(answers) is not dict:
        row["messages"].append("`my_answers` is not a dict of letters: nothing to mark")
        return row
    given = [answers.get(n) for n in range(1, len(key) + 1)]
    right = [
        n
        for n, (letter, mine) in enumerate(zip(key, given), 1)
        if type(mine) is str and mine.strip().lower() == letter
    ]
    row["points"] = float(CONCEPT_POINTS * len(right))
    wrong = [str(n) for n in range(1, len(key) + 1) if n not in right]
    row["messages"].append(
        f"{len(right)} of {len(key)} right"
        + (f"; not right: {', '.join(wrong)}" if wrong else "")
    )
    return row


def _score(task: Task, objs: list, row: dict) -> dict:
    """Half the task's points for its public grader, half for its hidden cases."""
    for part, check in (("public", task.public), ("hidden", task.hidden)):
        try:
            message = check(*objs)
            row["points"] += task.points / 2
            row["messages"].append(f"{part}: {message or 'all hidden cases passed'}")
        except CheckFailed as e:
            row["messages"].append(f"{part}: {e}")
        except Exception as e:  # a grader's own failure must not stop the others
            row["messages"].append(
                f"{part}: {type(e).__name__}:"
                f" {str(e).splitlines()[0] if str(e) else ''}"
            )
    return row


def _rows(assignment: str, refusal, objects) -> list[dict]:
    """One row per task, {task, points, out_of, messages}: 0 with the reason `refusal`
    gives for a name the task needs, else what the graders give `objects(task)`."""
    rows = []
    for task in ASSIGNMENTS[assignment]:
        row = {"task": task.name, "points": 0.0, "out_of": task.points, "messages": []}
        why = next(filter(None, (refusal(task, name) for name in task.needs)), None)
        try:
            objs = objects(task) if why is None else None
        except CheckFailed as e:  # a value that cannot cross from the sandbox
            why = str(e)
        rows.append(
            _score(task, objs, row) if why is None else {**row, "messages": [why]}
        )
    return rows


def _about(namespace: dict, name: str) -> dict:
    """What `name` is in `namespace`, as the sandbox's `describe` says it."""
    obj = namespace.get(name)
    module = str(getattr(obj, "__module__", "__main__"))
    return {"defined": name in namespace, "none": obj is None, "module": module}


def grade(assignment: str, namespace: dict, runs: dict | None = None) -> list[dict]:
    """One row per task for a submission's names given in this process (and A3's
    `runs`): for testing the graders. `make grade` uses the sandbox instead."""
    rows = _rows(
        assignment,
        lambda task, name: _refusal(task, name, _about(namespace, name)),
        lambda task: [runs] * task.runs + [namespace[name] for name in task.needs],
    )
    return rows + [grade_concepts(assignment, namespace)]


def grade_in_sandbox(assignment: str, box) -> list[dict]:
    """One row per task for a submission run in the sandbox `box`: its names answer
    through `box.call` (A3's through `box.value`), and the graders compare here."""
    # the files handed in, not the sandbox's copy
    runs = find_runs(box.notebook.parent / RUNS)
    rows = _rows(
        assignment,
        lambda task, name: _refusal(task, name, box.describe(name), box.errors),
        lambda task: (
            [runs] * task.runs
            + [
                box.value(name) if task.runs else functools.partial(box.call, name)
                for name in task.needs
            ]
        ),
    )
    try:
        answers = box.value("my_answers")
    except Exception:  # not defined, or not plain data: nothing to mark
        answers = None
    rows.append(grade_concepts(assignment, {"my_answers": answers}))
    return rows
