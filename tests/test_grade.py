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
from nmt_lib.attention import attend  # noqa: E402
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
    cell = next(c for c in nb["cells"] if "def masked_softmax" in "".join(c["source"]))
    cell["source"] = "".join(cell["source"]).replace("dim=-1", "dim=-2")     # the weights of each key sum to 1
    broken = tmp_path / "broken.ipynb"
    broken.write_text(json.dumps(nb))
    right, wrong = make_grade("ASSIGNMENT=A1", f"SUBMISSION={answer}"), make_grade("ASSIGNMENT=A1", f"SUBMISSION={broken}")
    assert right.returncode == wrong.returncode == 0, right.stderr + wrong.stderr
    assert total(right.stdout) == 30 and total(wrong.stdout) < total(right.stdout)
    assert "public: a padding mask of shape (B, 1, Tk): the weights sum to 1 over the keys" in wrong.stdout
    assert "the masked softmax: 0 / 10" in wrong.stdout


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
    answer = namespace_of(ANSWERS / "A1_attention.ipynb")

    def float32_softmax(scores, mask):                    # right on the public float32 cases only
        return answer["masked_softmax"](scores.float(), mask)
    rows = grade("A1", {**answer, "masked_softmax": float32_softmax})
    assert [r["points"] for r in rows] == [5.0, 10.0, 10.0]
    assert rows[0]["messages"][0].startswith("public: masked softmax: right in all 5 cases")
    assert rows[0]["messages"][1] == "hidden: float64 scores with a (Tq, Tk) mask: the weights should keep the scores' dtype torch.float64"


def test_a_task_the_submission_does_not_define_or_imports_from_the_course_scores_zero_and_says_why():
    from nmt_lib.decoding import beam_step
    rows = grade("A2", {"kv_step": None, "beam_step": beam_step})
    assert [r["points"] for r in rows] == [0, 0, 0]
    assert rows[0]["messages"] == ["`MyDecoderBlock` is not defined: run the cell that defines it, or name it so"]
    assert rows[1]["messages"] == ["`kv_step` is still None: the task is not done"]
    assert rows[2]["messages"] == ["`beam_step` comes from nmt_lib.decoding: write your own"]


def test_the_model_answers_score_full_marks_and_the_unmodified_templates_nothing():
    for assignment, notebook in [("A1", "A1_attention.ipynb"), ("A2", "A2_transformer.ipynb")]:
        assert [r["points"] for r in grade(assignment, namespace_of(ANSWERS / notebook))] == [10, 10, 10]
        template = grade(assignment, namespace_of(ROOT / "assignments" / notebook))
        assert [r["points"] for r in template] == [0, 0, 0]
        assert all("NotImplementedError" in r["messages"][0] for r in template)


def test_a_wrapper_or_an_empty_subclass_of_the_course_s_code_scores_zero_and_says_why():
    import nmt_lib.decoding as decoding
    from nmt_lib.transformer import DecoderBlock
    a1 = namespace_of(ANSWERS / "A1_attention.ipynb")
    a2 = namespace_of(ANSWERS / "A2_transformer.ipynb")

    a1 |= {"attend": attend, "MyMultiHeadAttention": type("Mine", (MultiHeadAttention,), {})}
    exec("def attention(q, k, v, mask=None):\n"                           # the course's attend, wrapped
         "    return attend(q, k, v, mask, need_weights=True)", a1)
    a2 |= {"decoding": decoding, "MyDecoderBlock": type("MyDecoderBlock", (DecoderBlock,), {})}
    exec("def beam_step(scores, logp, finished, eos_id):\n"               # through the module
         "    return decoding.beam_step(scores, logp, finished, eos_id)", a2)
    rows = grade("A1", a1) + grade("A2", a2)
    assert [r["points"] for r in rows] == [10, 0, 0, 0, 10, 0]
    assert rows[1]["messages"][0] == ("public: `attention` uses the course's nmt_lib.attention.attend, which this "
                                      "task asks you to write yourself")
    assert rows[2]["messages"] == ["`MyMultiHeadAttention` subclasses the course's nmt_lib.multihead.MultiHeadAttention: "
                                   "write your own"]
    assert rows[3]["messages"] == ["`MyDecoderBlock` subclasses the course's nmt_lib.transformer.DecoderBlock: "
                                   "write your own"]
    assert "uses the course's nmt_lib.decoding.beam_step" in rows[5]["messages"][0]
    assert decoding.beam_step.__module__ == "nmt_lib.decoding" and a1["attend"] is attend   # all restored


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
                          "--limit", "20"], cwd=ROOT, env=make_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    rows = {r["submission"]: r for r in csv.DictReader(out.open(encoding="utf-8"))}
    assert set(rows) == {"alice/A1.ipynb", "bob.ipynb"}
    alice, bob = rows["alice/A1.ipynb"], rows["bob.ipynb"]
    assert (alice["status"], float(alice["points"]), alice["out of"]) == ("graded", 30.0, "30")
    assert alice["the masked softmax: messages"].startswith("public: masked softmax: right in all")
    assert bob["status"] == "not graded: stopped after 20 s (--limit)" and float(bob["points"]) == 0
    assert "2 submissions" in run.stdout and "bob.ipynb: not graded" in run.stdout
