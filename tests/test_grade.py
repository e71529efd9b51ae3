"""The teacher's kit: `make grade` scores assignments with the public graders and hidden
tests, and `make student` writes an edition without solutions that still runs."""

import json
import os
import re
import subprocess
import sys

import nbformat
import pytest

from conftest import ROOT, write_notebook

sys.path.insert(0, str(ROOT))  # grading/ is a folder of the repository, not a package
from grading.hidden import grade  # noqa: E402
import torch  # noqa: E402
import student_edition  # noqa: E402

ANSWERS = ROOT / "solutions" / "assignments"


def make_env():
    drop = ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "NMT_QUICK": "1", "NMT_THREADS": "1"}


def make_grade(*args):
    command = ["make", "-s", "--no-print-directory", "grade", *args]
    return subprocess.run(
        command, cwd=ROOT, env=make_env(), capture_output=True, text=True, timeout=300
    )


def total(out: str) -> float:  # from "A1, name.ipynb: 30 / 30 points"
    return float(re.search(r"^A\d, \S+: ([\d.]+) / [\d.]+ points$", out, re.M).group(1))


def test_make_grade_scores_a_correct_and_a_broken_submission_differently(tmp_path):
    answer = ANSWERS / "A1_attention.ipynb"
    nb = json.loads(answer.read_text())
    cell = next(
        c for c in nb["cells"] if "def sliding_window_mask" in "".join(c["source"])
    )
    # one key too many
    cell["source"] = "".join(cell["source"]).replace(
        "distance < window", "distance <= window"
    )
    broken = tmp_path / "broken.ipynb"
    broken.write_text(json.dumps(nb))
    right = make_grade("ASSIGNMENT=A1", f"SUBMISSION={answer}")
    wrong = make_grade("ASSIGNMENT=A1", f"SUBMISSION={broken}")
    assert right.returncode == wrong.returncode == 0, right.stderr + wrong.stderr
    assert total(right.stdout) == 38 and total(wrong.stdout) < total(right.stdout)
    assert "public: 4 queries, 4 keys, window 2: a query sees 3 keys" in wrong.stdout
    assert "a sliding-window mask: 0 / 10" in wrong.stdout


def test_grading_refuses_where_no_namespace_can_be_made_unless_told_not_to():
    """Without bubblewrap, one line says what to do and nothing is graded; with
    --no-isolation the notebook is graded, and the report says it was not isolated."""
    answer = str(ANSWERS / "A1_attention.ipynb")
    env = {**make_env(), "PATH": os.path.dirname(sys.executable)}  # no bwrap
    command = [sys.executable, "tools/grade.py", "A1", answer]
    kw = dict(cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    runs = [subprocess.run(command + more, **kw) for more in ([], ["--no-isolation"])]
    assert runs[0].returncode == 2 and runs[0].stdout == ""
    assert "bubblewrap" in runs[0].stderr and len(runs[0].stderr.splitlines()) == 1
    assert runs[1].returncode == 0 and total(runs[1].stdout) == 38
    assert "not isolated" in runs[1].stdout


def namespace_of(notebook) -> dict:
    """The names a notebook's code cells define, as its kernel would (in `__main__`),
    its graders' calls and IPython magics left out."""
    namespace = {"__name__": "__main__"}
    for cell in json.loads(notebook.read_text())["cells"]:
        lines = "".join(cell["source"]).splitlines()
        if cell["cell_type"] == "code" and not any("run_check(" in x for x in lines):
            exec("\n".join(x for x in lines if not x.startswith("%")), namespace)
    return namespace


def test_the_hidden_cases_catch_what_the_public_grader_does_not():
    answer = namespace_of(ANSWERS / "A2_transformer.ipynb")

    # right on the public float32 cases only
    def float32_penalty(logits, generated, penalty):
        return answer["repetition_penalty"](logits.float(), generated, penalty)

    rows = grade("A2", {**answer, "repetition_penalty": float32_penalty})
    assert [r["points"] for r in rows] == [5.0, 10.0, 10.0, 8.0]
    assert rows[0]["messages"][0].startswith(
        "public: repetition penalty: right in all 5 cases"
    )
    assert (
        rows[0]["messages"][1]
        == "hidden: float64 logits over 50 tokens, 12 generated with repeats, penalty"
        " 1.2: the logits should keep their dtype torch.float64"
    )


def test_a_task_undefined_or_imported_from_the_course_scores_zero_and_says_why():
    from nmt_lib.decoding import beam_search

    rows = grade("A2", {"greedy_with_penalty": None, "n_best": beam_search})
    assert [r["points"] for r in rows] == [0, 0, 0, 0]
    assert rows[0]["messages"] == [
        "`repetition_penalty` is not defined: run the cell that defines it, or name"
        " it so"
    ]
    assert rows[1]["messages"] == [
        "`greedy_with_penalty` is still None: the task is not done"
    ]
    assert rows[2]["messages"] == [
        "`n_best` comes from nmt_lib.decoding: write your own"
    ]


def test_the_public_graders_name_the_usual_mistakes():
    a1 = namespace_of(ANSWERS / "A1_attention.ipynb")
    a2 = namespace_of(ANSWERS / "A2_transformer.ipynb")
    n = torch.arange

    def symmetric_window(tq, tk, window):  # |p - j| < window: sees later keys too
        return (n(tk - tq, tk)[:, None] - n(tk)).abs() < window

    # each head the slope of the head before it
    slopes_from_zero = lambda h, tq, tk: a1["alibi_bias"](h, tq, tk) * 2.0 ** (8 / h)

    def divides_all(logits, generated, penalty):  # a negative logit divided goes up
        return logits.scatter(1, generated, logits.gather(1, generated) / penalty)

    queries_first = lambda tq, tk, w: a1["sliding_window_mask"](tk, tk, w)[:tq]

    wrong = [
        ("A1", 0, "sliding_window_mask", symmetric_window, "a query sees a later key"),
        ("A1", 0, "sliding_window_mask", queries_first, "newest of 5 positions"),
        ("A1", 1, "alibi_bias", slopes_from_zero, "slopes are one step off"),
        ("A2", 0, "repetition_penalty", divides_all, "a negative logit went up"),
    ]
    for assignment, task, name, fn, why in wrong:
        row = grade(assignment, {**(a1 if assignment == "A1" else a2), name: fn})[task]
        said = row["messages"][0]
        assert row["points"] == 0 and why in said and "expected" not in said, row

    # alibi forgotten: chapter 5's attention with a window
    class NoBias(a1["MyLocalAttention"]):
        def __init__(self, d_model, n_heads, window=None, alibi=True):
            super().__init__(d_model, n_heads, window, alibi=False)

    said = grade("A1", {**a1, "MyLocalAttention": NoBias})[2]["messages"][0]
    assert "ALiBi, window 3: the output is chapter 5's attention: the bias" in said


def test_the_model_answers_score_full_marks_and_the_unmodified_templates_nothing(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # no hand-in/ here: A3's template finds none
    pairs = [("A1", "A1_attention.ipynb"), ("A2", "A2_transformer.ipynb")]
    for assignment, notebook in pairs:
        answer = grade(assignment, namespace_of(ANSWERS / notebook))
        assert [r["points"] for r in answer] == [10, 10, 10, 8]
        template = grade(assignment, namespace_of(ROOT / "assignments" / notebook))
        assert [r["points"] for r in template] == [0, 0, 0, 0]
        assert all("NotImplementedError" in r["messages"][0] for r in template[:3])
    a3 = grade("A3", namespace_of(ROOT / "assignments" / "A3_training.ipynb"), runs={})
    assert [r["messages"] for r in a3] == [
        ["`chosen` is still None: the task is not done"],
        ["`ablation` is still None: the task is not done"],
        ["0 of 4 right; not right: 1, 2, 3, 4"],
    ]


def test_a_concept_check_says_not_which_answers_are_right_and_the_grader_marks_them(
    capsys,
):
    from grading.hidden import CONCEPT_KEYS
    from nmt_lib.checks import answers_well_formed

    right = dict(enumerate(CONCEPT_KEYS["A1"], 1))
    wrong = {n: "abcd"[("abcd".index(letter) + 1) % 4] for n, letter in right.items()}
    said = []
    for answers in (right, wrong):
        assert answers_well_formed(answers) == 4
        said.append(capsys.readouterr().out)
    assert said[0] == said[1]  # the student's check cannot tell right from wrong
    assert answers_well_formed({1: "e", 2: "B"}) == 1

    class EqualsEverything(str):
        def __eq__(self, other):
            return True

        __hash__ = str.__hash__

    cheat = {n: EqualsEverything("x") for n in right}
    marks = [
        grade("A1", {"my_answers": answers})[-1]["points"]
        for answers in (right, wrong, cheat, None)
    ]
    assert marks == [8, 0, 0, 0]


def test_the_released_assignments_hold_none_of_the_model_answers():
    """Every line inside a source's solution regions, every written model answer and
    every teacher-only cell is absent from the notebook `make release` wrote (a region
    without its markers would show)."""
    for source in sorted(ANSWERS.glob("A*.ipynb")):
        released = json.loads((ROOT / "assignments" / source.name).read_text())
        shown = "\n".join("".join(c["source"]) for c in released["cells"])
        secret = []
        for cell in json.loads(source.read_text())["cells"]:
            text, meta = "".join(cell["source"]), cell["metadata"]
            if "teacher-only" in meta.get("tags", []) or (
                cell["cell_type"] == "markdown"
                and meta.get("nbgrader", {}).get("solution")
            ):
                secret += text.splitlines()
            for region in text.split("### BEGIN SOLUTION")[1:]:
                secret += region.split("### END SOLUTION")[0].splitlines()
        secret = [line.strip() for line in secret if len(line.strip()) > 12]
        assert len(secret) > 20, source.name
        assert [line for line in secret if line in shown] == [], source.name


def test_the_student_edition_leaves_out_the_solutions_and_all_that_points_to_them(
    tmp_path,
):
    dest = tmp_path / "student"
    files = student_edition.write(dest)
    assert not any(f.startswith(("solutions/", "grading/", "tests/")) for f in files)
    assert not any((dest / f).exists() for f in ("solutions", "book/teachers.md"))
    assert {"assignments/A1_attention.ipynb", "nmt_lib/checks/a1.py"} <= set(files)
    for nb in (dest / "notebooks").glob("*.ipynb"):
        assert "solutions/" not in nb.read_text(), nb.name
    index = (dest / "book" / "index.md").read_text()
    assert ":caption: Chapters" in index
    assert not re.search(":caption: (Solutions|For teachers)", index)
    assert "teachers.md" not in (dest / "README.md").read_text()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match="exists and is not an empty folder"):
        student_edition.write(tmp_path / "taken")
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine"


# each task's rule as a docstring, a comment or a cell could spell it (normalised)
TASK_RULES = {
    "A1 task 1's window": r"[a-z]-w(indow)?(\+1|<[a-z])|[a-z]>[a-z]-w|(p-j|distance)<w",
    "A1 task 2's slopes": r"2(\.0)?\^-8|1/2\^8|2(\.0)?\^8/|256\^|-8\*?h/|0\.5\^8",
    "A2 task 1's sign rule": r"positive.{0,40}divid|negative.{0,40}multipl|divid\w{0,6}"
    r"positive|multipl\w{0,6}negative|[<>]=?0.{0,40}[*/](penalty|\\theta|θ)"
    r"|[*/](penalty|\\theta|θ).{0,20}[<>]=?0",
}


def test_the_student_edition_states_no_task_s_rule(tmp_path):
    for name in student_edition.write(tmp_path):
        if not name.endswith((".py", ".md", ".ipynb")):
            continue
        text = (tmp_path / name).read_text(encoding="utf-8")
        if name.endswith(".ipynb"):
            text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"])
        text = re.sub(r"\\frac\{(.*?)\}\{", r"\1/", text.lower().replace("**", "^"))
        text = re.sub(r"\\cdot|\\times|·", "*", text.replace("−", "-"))
        text = re.sub(r"\s|[{}()]|\\left|\\right|\\,", "", text.replace("⁻⁸", "^-8"))
        for rule, spelling in TASK_RULES.items():
            assert not (found := re.search(spelling, text)), (name, rule, found[0])


def test_the_student_edition_runs_its_own_nbval(tmp_path):
    """The assignments and the first chapters, under nbval in the copy, importing the
    copy's nmt_lib (the whole run, `make nbval` there, takes as long as the course's
    own)."""
    dest = tmp_path / "student"
    student_edition.write(dest)
    env = {**make_env(), "PYTHONPATH": str(dest)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["assignments", "notebooks/00_course.ipynb"]
    command += ["notebooks/03_scoring.ipynb", "--nbval-lax", "--nbval-current-env"]
    command += ["--nbval-sanitize-with", "tools/nbval_sanitize.cfg"]
    out = subprocess.run(
        command, cwd=dest, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout[-3000:]
    assert " passed" in out.stdout.strip().splitlines()[-1]


NBEST = """
def n_best(model, src, src_len, *, bos_id, eos_id, beam_size, n, max_len, alpha):
    # the course's search
    best = SEARCH(model, src, src_len, bos_id=bos_id, eos_id=eos_id,
                  beam_size=beam_size, max_len=max_len, alpha=alpha).tokens
    return [[(tokens, 0.0)] * n for tokens in best]
"""
SETUP = """import functools, importlib, inspect, json, sys, types
from pathlib import Path
import torch
import nmt_lib
from nmt_lib.decoding import beam_search, beam_step
"""
# each handed in as the answer to A2's third task; the grader that swapped objects gave
# some 10
ATTACKS = {
    "a wrapper around the course's beam_step": (
        "def SEARCH(model, src, src_len, **kw):\n"
        "    beam_step(torch.zeros(1, 2), torch.zeros(1, 2, 5), "
        "torch.zeros(1, 2, dtype=torch.bool), 2)\n"
    ),
    "the course's beam_search in a functools.partial": (
        "SEARCH = functools.partial(beam_search)\n"
    ),
    "exec of the model answer's cells": (
        "answer = Path(nmt_lib.__file__).parents[1] / 'solutions' / 'assignments'\n"
        "for cell in json.loads((answer / 'A2_transformer.ipynb').read_text())"
        "['cells']:\n    if cell['cell_type'] == 'code':\n"
        "        exec(''.join(cell['source']))\nSEARCH = beam_search\n"
    ),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_each_way_of_handing_in_the_course_s_code_scores_zero_in_the_sandbox(
    tmp_path, attack
):
    """Graded as make grade grades A1 and A2, in the sandbox: the course's search is
    withheld there (test_sandbox tries the other ways of keeping beam_step), and the
    model answers are not beside its copy of the course."""
    from grading.hidden import grade_in_sandbox
    from grading.sandbox import Sandbox

    notebook = write_notebook(tmp_path / "A2.ipynb", SETUP, ATTACKS[attack], NBEST)
    with Sandbox("A2", notebook, timeout=120) as box:
        row = grade_in_sandbox("A2", box)[2]
    assert row["points"] == 0
    assert any(
        why in row["messages"][0]
        for why in ("the course's beam_s", "No such file", "not defined")
    ), row


def test_replacing_the_grader_s_compare_in_the_submission_changes_nothing(tmp_path):
    from grading.hidden import grade_in_sandbox
    from grading.sandbox import Sandbox

    cheat = (
        "import nmt_lib.checks.core as core, nmt_lib.checks.a2 as public\n"
        "core.compare = public.compare = lambda *args, **kwargs: None\n"
        "def repetition_penalty(logits, generated, penalty):\n    return logits\n"
    )
    notebook = write_notebook(tmp_path / "A2.ipynb", cheat)
    with Sandbox("A2", notebook, timeout=120) as box:
        row = grade_in_sandbox("A2", box)[0]
    assert row["points"] == 0 and "public: one token each" in row["messages"][0]


def test_an_empty_subclass_of_the_course_s_attention_scores_zero_in_the_sandbox(
    tmp_path,
):
    from grading.hidden import grade_in_sandbox
    from grading.sandbox import Sandbox

    source = (
        "from nmt_lib.multihead import MultiHeadAttention\n\nclass"
        " MyLocalAttention(MultiHeadAttention):\n    pass\n"
    )
    notebook = write_notebook(tmp_path / "A1.ipynb", source)
    with Sandbox("A1", notebook, timeout=120) as box:
        row = grade_in_sandbox("A1", box)[2]
    assert (
        row["points"] == 0 and "MultiHeadAttention is withheld" in row["messages"][0]
    ), row


# Carol's last cell: what of the course folder her kernel finds, a process meant to
# outlive it, her classmates' notebooks written over or linked to, the memory and the
# disk filled
ATTACK = """import subprocess, sys
from pathlib import Path

course = Path.cwd().parents[2]  # autograded/carol/A1, or the sandbox's folder
found = [p.name for p in course.glob("*") if p.name != "autograded"]
print("found", found or "nothing")
later = [sys.executable, "-c", "import time; time.sleep(600)", "nmt-left-running"]
subprocess.Popen(later, start_new_session=True)
for other in course.glob("submitted/*/A1/*.ipynb"):
    other.write_text("{}")
# links for nbgrader to follow: her notebook's copy to Alice's, notes to the gradebook
for mine in Path.cwd().glob("*.ipynb"):
    mine.unlink()
    mine.symlink_to(course / "submitted/alice/A1" / mine.name)
Path("notes.json").symlink_to(course / "gradebook.db")
try:
    bytearray(16 * 2**30)
except MemoryError:
    print("no 16 GiB")
try:
    open("big", "wb").truncate(2 * 2**30)
except OSError:
    print("no 2 GiB file")
"""
KILLS = """import os, signal
os.kill(-1, signal.SIGKILL)
os.killpg(0, signal.SIGKILL)
os._exit(1)
"""


@pytest.mark.slow
def test_a_class_goes_through_nbgrader_with_the_sandbox_s_points_whatever_one_does(
    tmp_path,
):
    """A right, a wrong and a stuck submission of A1, and two that break: collected,
    autograded by nbgrader, graded in the sandbox, one written answer graded by hand (as
    formgrader would), feedback, and nbgrader's export. Bob's window is wrong, and his
    attention uses it; Carol's ALiBi cell never ends, and is stopped, and she also looks
    for the course folder, leaves a process running and writes over her classmates'
    notebooks; Dave's notebook kills what it can; Erin's is not a notebook."""
    import csv
    from nbgrader.api import Gradebook

    answer = json.loads((ANSWERS / "A1_attention.ipynb").read_text())
    wrong, stuck = json.loads(json.dumps(answer)), json.loads(json.dumps(answer))
    cell = next(
        c for c in wrong["cells"] if "def sliding_window_mask" in "".join(c["source"])
    )
    cell["source"] = (
        "def sliding_window_mask(num_queries, num_keys, window):\n"  # |p - j| < window
        "    p = torch.arange(num_keys - num_queries, num_keys)[:, None]\n"
        "    return (p - torch.arange(num_keys)).abs() < window\n"
    )
    cell = next(c for c in stuck["cells"] if "def alibi_bias" in "".join(c["source"]))
    cell["source"] = "import time\ntime.sleep(600)\n"
    # Alice's own check, commented out, in an answer cell: it costs her nothing
    cell = next(c for c in answer["cells"] if "def alibi_bias" in "".join(c["source"]))
    cell["source"] = (
        "".join(cell["source"]) + "\n# run_check(check_alibi_bias, alibi_bias)"
    )
    stuck["cells"].append(nbformat.v4.new_code_cell(ATTACK))
    killer = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(KILLS)])
    for student, nb in zip(
        ["alice", "bob", "carol", "dave"], [answer, wrong, stuck, killer]
    ):
        (tmp_path / "class" / student).mkdir(parents=True)
        (tmp_path / "class" / student / "A1_attention.ipynb").write_text(json.dumps(nb))
    (tmp_path / "class" / "erin").mkdir()
    (tmp_path / "class" / "erin" / "A1_attention.ipynb").write_text("not JSON")
    course, out = tmp_path / "course", tmp_path / "grades.csv"
    # a cell has 30 s: room for importing torch on a slow machine, shared with the
    # other job; Carol's cell sleeps twenty times as long
    grading = [sys.executable, "tools/grade.py", "A1", str(tmp_path / "class")]
    grading += f"--course {course} --csv {out}".split()
    grading += "--jobs 2 --timeout 30 --limit 300".split()
    run = subprocess.run(
        grading, cwd=ROOT, env=make_env(), capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stdout + run.stderr
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "nmt-left-running" not in ps  # Carol's process ended with her kernels
    graded = json.loads((course / "autograded/carol/A1/A1_attention.ipynb").read_text())
    said = json.dumps(graded["cells"][-1]["outputs"])
    assert all(f in said for f in ("found nothing", "no 16 GiB", "no 2 GiB file"))
    assert not (course / "feedback/carol/A1/notes.json").exists()
    # the teacher, in formgrader
    with Gradebook(f"sqlite:///{course}/gradebook.db") as gb:
        gb.find_grade("A1-written-1", "A1_attention", "A1", "bob").manual_score = 4
        gb.db.commit()
    command = [sys.executable, "-m", "nbgrader", "export"]
    command += ["--exporter=grading.export.TaskCsv", f"--to={out}"]
    env = {**make_env(), "PYTHONPATH": str(ROOT)}
    export = subprocess.run(
        command, cwd=course, env=env, capture_output=True, text=True, timeout=120
    )
    assert export.returncode == 0, export.stderr
    rows = {r["student"]: r for r in csv.DictReader(out.open(encoding="utf-8"))}
    columns = ("A1-points", "A1-concepts")
    points = {
        s: [float(r[c]) for c in r if c.startswith(columns) and r[c]]
        for s, r in rows.items()
    }
    assert points == {
        "alice": [10, 10, 10, 8],
        "bob": [0, 10, 0, 8],
        "carol": [10, 0, 0, 8],
        "dave": [0, 0, 0, 0],  # his kernel ended; the class went on
        "erin": [],  # refused before nbgrader saw it
    }, points
    assert float(rows["bob"]["A1-written-1"]) == 4
    assert rows["alice"]["status"] == "graded; needs manual grading"
    assert rows["erin"]["status"].startswith("not graded: not a notebook")
    assert rows["alice"]["to read"] == "" and "subprocess" in rows["carol"]["to read"]
    assert rows["alice"]["out of"] == "58.0"
    feedback = (course / "feedback" / "bob" / "A1" / "A1_attention.html").read_text()
    assert "a query sees" in feedback  # the grader's sentence, as the cell's comment


# What each graded idea computes, tried on every function and class of the course's
# copy that the sandbox gives a submission (lessons and checks; the tooling is left
# out: it takes paths and runs). A name that computes one is not withheld.
FINDER = """
import importlib, pkgutil, signal, sys, torch
sys.path[:0] = [{lib!r}, {root!r}]
from grading import a1, a2


def core(fn):  # A1's third task at heart: masked scaled dot-product attention
    q, k, v = torch.randn(3, 2, 3, 5, 8, generator=torch.Generator().manual_seed(0))
    mask = torch.rand(5, 5) < 0.7
    mask[:, 0] = True
    out = fn(q, k, v, mask)
    out = out[0] if isinstance(out, tuple) else out
    scores = (q @ k.transpose(-1, -2) / 8**0.5).masked_fill(~mask, float("-inf"))
    assert torch.allclose(out, scores.softmax(-1) @ v, atol=1e-5)


def greedy(fn):  # A2's second task with no penalty
    model, (src, src_len) = a2.random_translator(3), a2.sources(3)
    ids = dict(bos_id=1, eos_id=2, max_len=10)
    got = a2.token_lists("", fn(model, src, src_len, **ids), 3)
    assert got == a2._greedy_reference(model, src, src_len, penalty=1, **ids)


IDEAS = {{
    "A1": [a1.window_mask, a1.alibi_bias, a1.local_attention, core],
    "A2": [a2.repetition_penalty, a2.n_best, greedy],
}}[{assignment!r}]
signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError()))
import nmt_lib
for info in pkgutil.walk_packages(nmt_lib.__path__, "nmt_lib."):
    if info.name.startswith(("nmt_lib.run", "nmt_lib.base", "nmt_lib.__main__")):
        continue
    try:
        module = importlib.import_module(info.name)
    except Exception:
        continue  # it does not import where this is withheld
    for name, obj in vars(module).items():
        if not callable(obj) or getattr(obj, "__module__", "") != info.name:
            continue
        for idea in IDEAS:
            signal.alarm(10)
            try:
                idea(obj)
                print(f"{{info.name}}.{{name}} computes {{idea.__name__}}")
            except BaseException:
                pass
            signal.alarm(0)
"""


@pytest.mark.parametrize("assignment", ["A1", "A2"])
def test_every_course_implementation_of_a_graded_idea_is_withheld(tmp_path, assignment):
    from grading.sandbox import course_copy

    lib = course_copy(assignment, tmp_path / "lib")
    script = FINDER.format(lib=str(lib), root=str(ROOT), assignment=assignment)
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
        env={**make_env(), "PYTHONPATH": "", "HOME": str(tmp_path)}, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0 and run.stdout == "", run.stdout + run.stderr[-2000:]


def test_a_notebook_too_odd_for_nbgrader_is_not_graded_and_its_cells_still_listed(
    tmp_path,
):
    """Not JSON, a cell that is not text, or a written answer long enough to hold up
    nbconvert: refused before nbgrader sees it; the reading list still reads it."""
    import grade
    from grading.export import to_read

    answer = ANSWERS / "A1_attention.ipynb"
    assert grade.refused(answer) is None
    numbers, long = json.loads(answer.read_text()), json.loads(answer.read_text())
    numbers["cells"][1]["source"] = ["y = 1\n", 1]
    long["cells"][0]["source"] = "[" * 100_000
    for i, text in enumerate(["{", json.dumps(numbers), json.dumps(long)]):
        (path := tmp_path / f"{i}.ipynb").write_text(text)
        assert grade.refused(path).startswith("not graded: ")
        assert isinstance(to_read(path), str)
