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
from nmt_lib.attention import attend, masked_softmax  # noqa: E402
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


def test_the_hidden_cases_catch_what_the_public_grader_does_not():
    def float32_softmax(scores, mask):                    # right on the public float32 cases only
        return masked_softmax(scores.float(), mask=mask)
    rows = grade("A1", {"masked_softmax": float32_softmax,
                        "attention": lambda q, k, v, mask=None: attend(q, k, v, mask, need_weights=True),
                        "MyMultiHeadAttention": type("Mine", (MultiHeadAttention,), {})})   # defined here
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


def test_the_model_answers_pass_their_hidden_tests_too():
    namespace = {}
    for cell in json.loads((ANSWERS / "A2_transformer.ipynb").read_text())["cells"]:
        lines = "".join(cell["source"]).splitlines()
        if cell["cell_type"] == "code" and not any("run_check(" in line for line in lines):
            exec("\n".join(line for line in lines if not line.startswith("%")), namespace)   # no IPython magics
    assert [r["points"] for r in grade("A2", namespace)] == [10, 10, 10]


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
