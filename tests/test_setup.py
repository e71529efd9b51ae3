"""The set-up files agree with each other, and nmt_lib keeps to its allowed imports."""
import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {"torch", "numpy", "matplotlib", "pandas", "tqdm", "nmt_lib"}


def pins(lines):
    return {line.strip() for line in lines if re.match(r"^[A-Za-z0-9_.\-]+==", line.strip())}


def test_environment_yml_matches_requirements():
    requirements = pins((ROOT / "requirements.txt").read_text().splitlines())
    env = (ROOT / "environment.yml").read_text()
    assert re.search(r"^\s*-\s*python=3\.11\s*$", env, re.M), "environment.yml must pin Python 3.11"
    pip_section = env.split("- pip:", 1)[1].splitlines()
    conda_pins = pins(line.strip().lstrip("-").strip() for line in pip_section)
    assert conda_pins == requirements
    for name in ["torch==2.14.1", "torchvision==0.29.1", "d2l==1.0.3"]:
        assert name in requirements


def make_dry_run(target: str) -> list[str]:
    """The commands `make TARGET` would run here, as make expands them (`make -n`), nothing executed."""
    import os
    import subprocess
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}   # under make test
    out = subprocess.run(["make", "-n", "--no-print-directory", target, "CHROMIUM=/bin/true"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_make_course_runs_every_chapter_then_builds_the_book():
    commands = make_dry_run("course")
    course = commands.index(".venv/bin/python tools/run_course.py")
    assert any(c.startswith("make") and "book" in c for c in commands[course + 1:]) or \
        any(c.startswith(".venv/bin/sphinx-build") for c in commands[course + 1:])


def test_make_course_runs_the_chapters_and_make_solutions_the_solutions():
    import run_course

    assert ".venv/bin/python tools/run_course.py" in make_dry_run("course")
    assert ".venv/bin/python tools/run_course.py --solutions" in make_dry_run("solutions")
    assert ".venv/bin/python tools/run_course.py --inplace --all" in make_dry_run("notebooks")
    chapters, solutions = sorted((ROOT / "notebooks").glob("*.ipynb")), sorted((ROOT / "solutions").glob("*.ipynb"))
    solutions += sorted((ROOT / "solutions/assignments").glob("*.ipynb"))     # the assignments' model answers
    assert len(solutions) > len(chapters) - 1
    assert run_course.chosen() == (("notebooks",), chapters)
    assert run_course.chosen(solutions=True) == (("solutions", "solutions/assignments"), solutions)
    assert run_course.chosen(everything=True)[1] == chapters + solutions
    assert run_course.chosen("01", everything=True)[1] == [ROOT / "notebooks/01_data.ipynb", ROOT / "solutions/01_data.ipynb"]


def test_ci_runs_both_stacks_with_the_shared_data(tmp_path):
    import os
    import subprocess
    fake, log = tmp_path / "bin", tmp_path / "make.log"
    fake.mkdir()
    (fake / "make").write_text('#!/bin/sh\necho "$* NMT_DATA_DIR=${NMT_DATA_DIR:-unset}" >> "$LOG"\n')
    (fake / "make").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "LOG": str(log)}
    env.pop("NMT_DATA_DIR", None)
    subprocess.run(["bash", str(ROOT / ".ci" / "run")], env=env, check=True, timeout=60)
    shared = ROOT.parent / "shared" / "data"
    data = str(shared.resolve()) if shared.is_dir() else "unset"
    assert log.read_text().splitlines() == [f"test NMT_DATA_DIR={data}", f"test-latest NMT_DATA_DIR={data}"]


# sacreBLEU is the reference scorer of `python -m nmt_lib evaluate`, SentencePiece the subword tokenizer
# (chapter 8b), ipywidgets and IPython the translator app (chapter 8), safetensors the published model's
# weights (nmt_lib.run.published): each is imported inside the functions
# that use it, so that importing nmt_lib never needs it.
LAZY_ONLY = {"sacrebleu", "sentencepiece", "ipywidgets", "IPython", "safetensors"}


def test_nmt_lib_imports_only_torch_numpy_matplotlib_pandas_and_tqdm():
    for path in sorted((ROOT / "nmt_lib").rglob("*.py")):
        tree = ast.parse(path.read_text())
        in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                       for n in ast.walk(f)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                lazy_ok = top in LAZY_ONLY and id(node) in in_function
                assert top in ALLOWED or top in sys.stdlib_module_names or lazy_ok, f"{path.name} imports {name}"


def test_no_module_imports_another_modules_private_names():
    for path in sorted((ROOT / "nmt_lib").rglob("*.py")):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nmt_lib"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from {node.module}"


def notebook_cells(path):
    import json
    return json.loads(path.read_text())["cells"]


def test_a_chapter_with_exercises_has_its_solutions_executed_beside_it():
    chapters = [p for p in sorted((ROOT / "notebooks").glob("*.ipynb"))
                if any("## Exercises" in "".join(c["source"]) for c in notebook_cells(p))]
    assert chapters, "no chapter has exercises"
    for path in chapters:
        solutions = ROOT / "solutions" / path.name
        assert solutions.is_file(), f"{path.name} has exercises but no {solutions.relative_to(ROOT)}"
        code = [c for c in notebook_cells(solutions) if c["cell_type"] == "code"]
        assert code and all(c.get("outputs") or c.get("execution_count") for c in code), \
            f"{solutions.name} is not executed"
        assert f"solutions/{path.name}" in "".join("".join(c["source"]) for c in notebook_cells(path))


def test_every_package_of_nmt_lib_is_installed_by_pyproject():
    # A sub-package missing from [tool.setuptools] packages imports in a checkout but not after `pip install .`.
    import tomllib
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "nmt_lib").rglob("__init__.py")}
    assert found == listed


@pytest.mark.slow
def test_run_course_keeps_no_progress_bar_widget_but_keeps_other_widgets(tmp_path, monkeypatch):
    import nbformat
    import run_course

    monkeypatch.setenv("TQDM_DISABLE", "1")             # as run_course sets it: tqdm's notebook bar ignores it
    monkeypatch.setenv("NMT_HEADLINES", str(tmp_path / "h.jsonl"))
    src, dst = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("from tqdm.auto import tqdm\nfor _ in tqdm(range(3), desc='epoch 1'):\n    pass"),
        nbformat.v4.new_code_cell("import ipywidgets\nipywidgets.IntSlider(value=4)")])
    nbformat.write(nb, src)
    wall, error, _ = run_course.run_one(src, dst, tmp_path, tmp_path / "h.jsonl", timeout=60)
    out = nbformat.read(dst, as_version=4)
    assert error is None and out.cells[0].outputs == []
    [slider] = out.cells[1].outputs
    state = out.metadata.widgets[run_course.WIDGETS]["state"]
    assert slider["data"][run_course.VIEW]["model_id"] in state
    assert sorted(m["model_name"] for m in state.values()) == ["IntSliderModel", "LayoutModel", "SliderStyleModel"]
