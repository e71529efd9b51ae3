"""The teacher's kit: `make grade` scores assignments with the public graders and hidden tests, and
`make student` writes an edition without solutions that still runs."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT))                             # grading/ is a folder of the repository, not a package
from grading.hidden import grade  # noqa: E402
import torch  # noqa: E402
from nmt_lib.multihead import MultiHeadAttention  # noqa: E402
import student_edition  # noqa: E402

ANSWERS = ROOT / "solutions" / "assignments"


def make_env():
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    return {**env, "NMT_QUICK": "1", "NMT_THREADS": "1"}


def make_grade(*args):
    return subprocess.run(["make", "-s", "--no-print-directory", "grade", *args], cwd=ROOT, env=make_env(),
                          capture_output=True, text=True, timeout=300)


def total(out: str) -> float:
    import re                                             # "A1, name.ipynb: 30 / 30 points"
    return float(re.search(r"^A\d, \S+: ([\d.]+) / [\d.]+ points$", out, re.M).group(1))


def test_make_grade_scores_a_correct_and_a_broken_submission_differently(tmp_path):
    answer = ANSWERS / "A1_attention.ipynb"
    nb = json.loads(answer.read_text())
    cell = next(c for c in nb["cells"] if "def sliding_window_mask" in "".join(c["source"]))
    cell["source"] = "".join(cell["source"]).replace("distance < window", "distance <= window")   # one key too many
    broken = tmp_path / "broken.ipynb"
    broken.write_text(json.dumps(nb))
    right, wrong = make_grade("ASSIGNMENT=A1", f"SUBMISSION={answer}"), make_grade("ASSIGNMENT=A1", f"SUBMISSION={broken}")
    assert right.returncode == wrong.returncode == 0, right.stderr + wrong.stderr
    assert total(right.stdout) == 38 and total(wrong.stdout) < total(right.stdout)
    assert "public: 4 queries, 4 keys, window 2: a query sees 3 keys" in wrong.stdout
    assert "a sliding-window mask: 0 / 10" in wrong.stdout


def namespace_of(notebook) -> dict:
    """The names a notebook's code cells define, as its kernel would (in `__main__`), its graders' calls and
    IPython magics left out."""
    namespace = {"__name__": "__main__"}
    for cell in json.loads(notebook.read_text())["cells"]:
        lines = "".join(cell["source"]).splitlines()
        if cell["cell_type"] == "code" and not any("run_check(" in line for line in lines):
            exec("\n".join(line for line in lines if not line.startswith("%")), namespace)
    return namespace


def test_the_hidden_cases_catch_what_the_public_grader_does_not():
    answer = namespace_of(ANSWERS / "A2_transformer.ipynb")

    def float32_penalty(logits, generated, penalty):      # right on the public float32 cases only
        return answer["repetition_penalty"](logits.float(), generated, penalty)
    rows = grade("A2", {**answer, "repetition_penalty": float32_penalty})
    assert [r["points"] for r in rows] == [5.0, 10.0, 10.0, 8.0]
    assert rows[0]["messages"][0].startswith("public: repetition penalty: right in all 5 cases")
    assert rows[0]["messages"][1] == ("hidden: float64 logits over 50 tokens, 12 generated with repeats, penalty 1.2: "
                                      "the logits should keep their dtype torch.float64")


def test_a_task_the_submission_does_not_define_or_imports_from_the_course_scores_zero_and_says_why():
    from nmt_lib.decoding import beam_search
    rows = grade("A2", {"greedy_with_penalty": None, "n_best": beam_search})
    assert [r["points"] for r in rows] == [0, 0, 0, 0]
    assert rows[0]["messages"] == ["`repetition_penalty` is not defined: run the cell that defines it, or name it so"]
    assert rows[1]["messages"] == ["`greedy_with_penalty` is still None: the task is not done"]
    assert rows[2]["messages"] == ["`n_best` comes from nmt_lib.decoding: write your own"]


def test_the_public_graders_name_the_usual_mistakes():
    a1, a2 = namespace_of(ANSWERS / "A1_attention.ipynb"), namespace_of(ANSWERS / "A2_transformer.ipynb")
    n = torch.arange

    def symmetric_window(tq, tk, window):                 # |p - j| < window: sees later keys too
        return (n(tk - tq, tk)[:, None] - n(tk)).abs() < window

    def slopes_from_zero(h, tq, tk):                      # m_h = 2^(-8h/H) for h = 0 .. H - 1
        return -(2.0 ** (-8 * n(h) / h))[:, None, None] * (n(tk - tq, tk)[:, None] - n(tk)).abs()

    def divides_all(logits, generated, penalty):          # a negative logit divided goes up
        return logits.scatter(1, generated, logits.gather(1, generated) / penalty)
    wrong = [("A1", 0, "sliding_window_mask", symmetric_window, "a query sees a later key"),
             ("A1", 1, "alibi_bias", slopes_from_zero, "your slopes are one step off in the geometric sequence"),
             ("A2", 0, "repetition_penalty", divides_all, "a negative logit went up, making a repeated token more likely")]
    for assignment, task, name, fn, why in wrong:
        row = grade(assignment, {**(a1 if assignment == "A1" else a2), name: fn})[task]
        assert row["points"] == 0 and why in row["messages"][0], (name, row)

    class NoBias(a1["MyLocalAttention"]):                 # alibi forgotten: chapter 5's attention with a window
        def __init__(self, d_model, n_heads, window=None, alibi=True):
            super().__init__(d_model, n_heads, window, alibi=False)
    rows = grade("A1", {**a1, "MyLocalAttention": NoBias})
    assert rows[2]["messages"][0] == "public: ALiBi, window 3: the output is chapter 5's attention: the bias was not added"


def test_the_model_answers_score_full_marks_and_the_unmodified_templates_nothing():
    for assignment, notebook in [("A1", "A1_attention.ipynb"), ("A2", "A2_transformer.ipynb")]:
        assert [r["points"] for r in grade(assignment, namespace_of(ANSWERS / notebook))] == [10, 10, 10, 8]
        template = grade(assignment, namespace_of(ROOT / "assignments" / notebook))
        assert [r["points"] for r in template] == [0, 0, 0, 0]
        assert all("NotImplementedError" in r["messages"][0] for r in template[:3])
    a3 = grade("A3", namespace_of(ROOT / "assignments" / "A3_training.ipynb"))
    assert [r["messages"] for r in a3] == [["`model` is still None: the task is not done"],
                                            ["`ablation` is still None: the task is not done"],
                                            ["0 of 4 right; not right: 1, 2, 3, 4"]]


def test_an_assignment_s_concept_check_says_nothing_of_which_answers_are_right_and_the_grader_marks_them(capsys):
    from grading.hidden import CONCEPT_KEYS
    from nmt_lib.checks import answers_well_formed
    right = dict(enumerate(CONCEPT_KEYS["A1"], 1))
    wrong = {n: "abcd"[("abcd".index(letter) + 1) % 4] for n, letter in right.items()}
    said = []
    for answers in (right, wrong):
        assert answers_well_formed(answers) == 4
        said.append(capsys.readouterr().out)
    assert said[0] == said[1]                             # the student's check cannot tell right from wrong
    assert answers_well_formed({1: "e", 2: "B"}) == 1

    class EqualsEverything(str):
        def __eq__(self, other):
            return True
        __hash__ = str.__hash__
    cheat = {n: EqualsEverything("x") for n in right}
    marks = [grade("A1", {"my_answers": answers})[-1]["points"] for answers in (right, wrong, cheat, None)]
    assert marks == [8, 0, 0, 0]


SDPA_ATTENTION = """
import torch.nn.functional as F


class MyLocalAttention(nn.Module):      # right, with PyTorch's attention given the bias as a float mask
    def __init__(self, d_model, n_heads, window=None, alibi=True):
        super().__init__()
        self.n_heads, self.window, self.alibi = n_heads, window, alibi
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, x, mask=None):
        B, T, D = x.shape
        q, k, v = (W(x).view(B, T, self.n_heads, -1).transpose(1, 2) for W in (self.W_q, self.W_k, self.W_v))
        allowed = torch.ones(T, T, dtype=torch.bool) if mask is None else mask
        allowed = allowed.unsqueeze(1) if allowed.dim() == 3 else allowed
        if self.window is not None:
            allowed = allowed & sliding_window_mask(T, T, self.window)
        bias = alibi_bias(self.n_heads, T, T) * self.alibi
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(~allowed, float("-inf")))
        return self.W_o(out.transpose(1, 2).reshape(B, T, D))
"""


def test_a_wrapper_or_an_empty_subclass_of_the_course_s_code_scores_zero_and_says_why():
    import nmt_lib.decoding as decoding
    a1 = namespace_of(ANSWERS / "A1_attention.ipynb")
    a2 = namespace_of(ANSWERS / "A2_transformer.ipynb")

    exec(SDPA_ATTENTION, a1)
    a2 |= {"decoding": decoding}
    exec("def n_best(model, src, src_len, *, beam_size, n, alpha, **ids):\n"    # the course's search, wrapped
         "    best = decoding.beam_search(model, src, src_len, beam_size=beam_size, alpha=alpha, **ids).tokens\n"
         "    return [[(tokens, 0.0)] for tokens in best]", a2)
    subclass = grade("A1", {**a1, "MyLocalAttention": type("Mine", (MultiHeadAttention,), {})})
    rows = grade("A1", a1) + grade("A2", a2)
    assert [r["points"] for r in rows] == [10, 10, 0, 8, 10, 10, 0, 8]
    assert rows[2]["messages"][0] == ("public: `MyLocalAttention` uses the course's "
                                      "torch.nn.functional.scaled_dot_product_attention, which this task asks you to "
                                      "write yourself")
    assert subclass[2]["messages"] == ["`MyLocalAttention` subclasses the course's "
                                       "nmt_lib.multihead.MultiHeadAttention: write your own"]
    assert "uses the course's nmt_lib.decoding.beam_search" in rows[6]["messages"][0]
    assert decoding.beam_search.__module__ == "nmt_lib.decoding"                        # all restored
    assert torch.nn.functional.scaled_dot_product_attention.__module__ != "grading.hidden"


def test_the_released_assignments_hold_none_of_the_model_answers():
    """Every line inside a source's solution regions, every written model answer and every teacher-only cell
    is absent from the notebook `make release` wrote (a region without its markers would show)."""
    for source in sorted(ANSWERS.glob("A*.ipynb")):
        released = json.loads((ROOT / "assignments" / source.name).read_text())
        shown = "\n".join("".join(c["source"]) for c in released["cells"])
        secret = []
        for cell in json.loads(source.read_text())["cells"]:
            text, meta = "".join(cell["source"]), cell["metadata"]
            if "teacher-only" in meta.get("tags", []) or (cell["cell_type"] == "markdown"
                                                          and meta.get("nbgrader", {}).get("solution")):
                secret += text.splitlines()
            for region in text.split("### BEGIN SOLUTION")[1:]:
                secret += region.split("### END SOLUTION")[0].splitlines()
        secret = [line.strip() for line in secret if len(line.strip()) > 12]
        assert len(secret) > 20, source.name
        assert [line for line in secret if line in shown] == [], source.name


def test_assignment_3_s_hidden_test_recomputes_the_chosen_row_of_the_table():
    """Chapter 7's own model handed in: it does not beat itself, and its row's interval must be the bootstrap's
    (0 to 0 against itself), not typed in."""
    import pandas as pd
    from nmt_lib.checks.assignments import model_bleu
    from nmt_lib.recipes import chapter_data, train_transformer
    model, _ = train_transformer(chapter_data(), quiet=True)
    rows = grade("A3", {"model": model, "ablation": None, "chosen": "recipe"})
    assert rows[0]["points"] == 0 and "and the target is" in rows[0]["messages"][0]
    bleu = model_bleu(model, "valid").bleu
    table = pd.DataFrame({"valid BLEU": [bleu, bleu - 1, bleu + 1], "minus baseline": [0.0, -1.0, 1.0],
                          "low": [0.0, -2.0, -0.5], "high": [0.0, 0.5, 2.0]}, index=["recipe", "a", "b"])
    assert grade("A3", {"model": model, "ablation": table, "chosen": "recipe"})[1]["points"] == 10
    table.loc["recipe", ["low", "high"]] = [-1.0, 1.0]
    row = grade("A3", {"model": model, "ablation": table, "chosen": "recipe"})[1]
    assert row["points"] == 5 and row["messages"][1].startswith("hidden: `ablation`, row 'recipe': low is -1.00, but"), row


def test_the_student_edition_leaves_out_the_solutions_and_keeps_nothing_that_points_to_them(tmp_path):
    dest = tmp_path / "student"
    files = student_edition.write(dest)
    assert not any(f.startswith(("solutions/", "grading/", "tests/")) for f in files)
    assert not (dest / "solutions").exists() and not (dest / "book" / "teachers.md").exists()
    assert (dest / "assignments" / "A1_attention.ipynb").is_file() and (dest / "nmt_lib" / "checks").is_dir()
    for nb in (dest / "notebooks").glob("*.ipynb"):
        assert "solutions/" not in nb.read_text(), nb.name
    index = (dest / "book" / "index.md").read_text()
    assert ":caption: Solutions" not in index and ":caption: For teachers" not in index and ":caption: Chapters" in index
    assert "teachers.md" not in (dest / "README.md").read_text()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match="exists and is not an empty folder"):
        student_edition.write(tmp_path / "taken")
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine"


def test_the_student_edition_runs_its_own_nbval(tmp_path):
    """The assignments and the first chapters, under nbval in the copy, importing the copy's nmt_lib (the whole
    run, `make nbval` there, takes as long as the course's own)."""
    dest = tmp_path / "student"
    student_edition.write(dest)
    env = {**make_env(), "PYTHONPATH": str(dest)}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "assignments",
                          "notebooks/00_course.ipynb", "notebooks/03_scoring.ipynb", "--nbval-lax",
                          "--nbval-current-env", "--nbval-sanitize-with", "tools/nbval_sanitize.cfg"],
                         cwd=dest, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:]
    assert " passed" in out.stdout.strip().splitlines()[-1]


def test_a_folder_is_graded_into_one_csv_row_per_submission_and_a_stuck_one_is_stopped(tmp_path):
    import csv
    import shutil
    folder = tmp_path / "class"
    (folder / "alice").mkdir(parents=True)
    shutil.copy(ANSWERS / "A1_attention.ipynb", folder / "alice" / "A1.ipynb")
    stuck = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "id": "stuck", "metadata": {}, "execution_count": None, "outputs": [],
         "source": "import time\ntime.sleep(600)"}]}
    (folder / "bob.ipynb").write_text(json.dumps(stuck))
    out = tmp_path / "grades.csv"
    run = subprocess.run([sys.executable, "tools/grade.py", "A1", str(folder), "--csv", str(out), "--jobs", "2",
                          "--limit", "12"], cwd=ROOT, env=make_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    rows = {r["submission"]: r for r in csv.DictReader(out.open(encoding="utf-8"))}
    assert set(rows) == {"alice/A1.ipynb", "bob.ipynb"}
    alice, bob = rows["alice/A1.ipynb"], rows["bob.ipynb"]
    assert (alice["status"], float(alice["points"]), alice["out of"]) == ("graded", 38.0, "38")
    assert alice["a sliding-window mask: messages"].startswith("public: sliding-window mask: right in all")
    assert bob["status"] == "not graded: stopped after 12 s (--limit)" and float(bob["points"]) == 0
    assert "2 submissions" in run.stdout and "bob.ipynb: not graded" in run.stdout


NBEST = """
def n_best(model, src, src_len, *, bos_id, eos_id, beam_size, n, max_len, alpha):    # the course's search
    best = SEARCH(model, src, src_len, bos_id=bos_id, eos_id=eos_id, beam_size=beam_size, max_len=max_len,
                  alpha=alpha).tokens
    return [[(tokens, 0.0)] * n for tokens in best]
"""
SETUP = """import functools, importlib, inspect, json, sys, types
from pathlib import Path
import torch
import nmt_lib
from nmt_lib.decoding import beam_search, beam_step
"""
ATTACKS = {   # each handed in as the answer to A2's third task; the grader that swapped objects gave some 10
    "a wrapper around the course's beam_step": "def SEARCH(model, src, src_len, **kw):\n"
                                              "    beam_step(torch.zeros(1, 2), torch.zeros(1, 2, 5), "
                                              "torch.zeros(1, 2, dtype=torch.bool), 2)\n",
    "the course's function kept in a default argument": "def SEARCH(*args, _search=beam_search, **kw):\n"
                                                        "    return _search(*args, **kw)\n",
    "in a closure": "def kept():\n    search = beam_search\n    return lambda *a, **k: search(*a, **k)\n"
                    "SEARCH = kept()\n",
    "in a functools.partial": "SEARCH = functools.partial(beam_search)\n",
    "a copy made from its code object": "SEARCH = types.FunctionType(beam_search.__code__, beam_search.__globals__,"
                                        " 'SEARCH', beam_search.__defaults__, beam_search.__closure__)\n"
                                        "SEARCH.__kwdefaults__ = beam_search.__kwdefaults__\n",
    "its source run with exec": "scope = dict(vars(sys.modules['nmt_lib.decoding']))\n"
                                "exec(inspect.getsource(beam_search), scope)\nSEARCH = scope['beam_search']\n",
    "a second import of nmt_lib": "for name in [m for m in sys.modules if m.startswith('nmt_lib')]:\n"
                                  "    del sys.modules[name]\n"
                                  "SEARCH = importlib.import_module('nmt_lib.decoding').beam_search\n",
    "exec of the model answer's cells": "answer = Path(nmt_lib.__file__).parents[1] / 'solutions' / 'assignments'\n"
                                        "for cell in json.loads((answer / 'A2_transformer.ipynb').read_text())"
                                        "['cells']:\n    if cell['cell_type'] == 'code':\n"
                                        "        exec(''.join(cell['source']))\nSEARCH = beam_search\n",
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_each_way_of_handing_in_the_course_s_code_scores_zero_in_the_sandbox(tmp_path, attack):
    """Graded as make grade grades A1 and A2, in the sandbox: the course's search is withheld there, however
    the submission keeps it, and the model answers are not beside its copy of the course."""
    from grading.hidden import grade_in_sandbox
    from grading.sandbox import Sandbox
    notebook = tmp_path / "A2.ipynb"
    cells = [SETUP, ATTACKS[attack], NBEST]
    notebook.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": None, "outputs": [], "source": s}
        for i, s in enumerate(cells)]}))
    with Sandbox("A2", notebook, timeout=120) as box:
        row = grade_in_sandbox("A2", box)[2]
    assert row["points"] == 0
    assert any(why in row["messages"][0] for why in ("the course's beam_s", "No such file", "not defined")), row


def test_replacing_the_grader_s_compare_in_the_submission_changes_nothing(tmp_path):
    from grading.hidden import grade_in_sandbox
    from grading.sandbox import Sandbox
    cheat = ("import nmt_lib.checks.core as core, nmt_lib.checks.assignments as public\n"
             "core.compare = public.compare = lambda *args, **kwargs: None\n"
             "def repetition_penalty(logits, generated, penalty):\n    return logits\n")
    notebook = tmp_path / "A2.ipynb"
    notebook.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "id": "c", "metadata": {}, "execution_count": None, "outputs": [], "source": cheat}]}))
    with Sandbox("A2", notebook, timeout=120) as box:
        row = grade_in_sandbox("A2", box)[0]
    assert row["points"] == 0 and "public: one token each" in row["messages"][0]


def test_an_empty_subclass_of_the_course_s_attention_scores_zero_in_the_sandbox(tmp_path):
    from grading.hidden import grade_in_sandbox
    from grading.sandbox import Sandbox
    notebook = tmp_path / "A1.ipynb"
    source = "from nmt_lib.multihead import MultiHeadAttention\n\nclass MyLocalAttention(MultiHeadAttention):\n    pass\n"
    notebook.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "id": "c", "metadata": {}, "execution_count": None, "outputs": [], "source": source}]}))
    with Sandbox("A1", notebook, timeout=120) as box:
        row = grade_in_sandbox("A1", box)[2]
    assert row["points"] == 0 and "MultiHeadAttention is withheld" in row["messages"][0], row


def test_assignment_3_s_template_is_graded_in_its_own_kernel_and_scores_nothing():
    out = make_grade("ASSIGNMENT=A3", f"SUBMISSION={ROOT / 'assignments' / 'A3_training.ipynb'}")
    assert out.returncode == 0, out.stderr
    assert total(out.stdout) == 0 and "`model` is still None: the task is not done" in out.stdout
