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


def test_make_test_builds_the_book_then_checks_the_export_lints_and_runs_every_notebook_under_nbval():
    commands = make_dry_run("test")
    book = next(i for i, c in enumerate(commands) if c.startswith(".venv/bin/sphinx-build"))
    checks = [commands.index(".venv/bin/python tools/export_lib.py --check"), commands.index(".venv/bin/ruff check .")]
    pytest_line = next(i for i, c in enumerate(commands) if " -m pytest " in c)
    assert book < checks[0] < checks[1] < pytest_line == len(commands) - 1
    run = commands[pytest_line].split()
    assert run[:2] == ["NMT_QUICK=1", "NMT_CHROMIUM=/bin/true"]
    assert run[run.index("pytest") + 1:run.index("pytest") + 4] == ["tests", "notebooks", "solutions"]
    assert {"--nbval-lax", "--nbval-current-env", "--nbval-sanitize-with"} <= set(run)


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


def test_every_chapter_opens_with_a_hidden_setup_cell_then_its_title_goals_and_a_summary():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = notebook_cells(path)
        setup, title = cells[0], cells[1]
        source = "".join(setup["source"])
        assert setup["cell_type"] == "code" and source.startswith("%matplotlib inline"), path.name
        assert "remove-cell" in setup["metadata"].get("tags", []), f"{path.name}: the book would show the setup cell"
        assert title["cell_type"] == "markdown" and "".join(title["source"]).startswith("# "), path.name
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        assert "**Learning goals.**" in text and "**Builds on:**" in text and "\n## Summary" in text, path.name


def test_the_teaching_chapters_use_the_plain_blocks():
    seventh = (ROOT / "notebooks" / "07_transformer.ipynb").read_text()
    assert "FastDropout" not in seventh
    for path in sorted((ROOT / "notebooks").glob("0*.ipynb")):
        code = "\n".join("".join(c["source"]) for c in notebook_cells(path) if c["cell_type"] == "code")
        for switch in ("fast_dropout=True", 'loss="sliced"', "fused_adam=True", "fused=True"):
            assert switch not in code, f"{path.name} switches on {switch}; chapter 10 is where speed-ups live"


def test_every_chapter_from_1_on_ends_with_exercises():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        if path.name.startswith("00_"):
            continue
        headings = [line for c in notebook_cells(path) if c["cell_type"] == "markdown"
                    for line in "".join(c["source"]).splitlines() if line.startswith("## ")]
        assert "## Exercises" in headings, f"{path.name} has no exercises"
        assert headings.index("## Exercises") > headings.index("## Summary"), \
            f"{path.name}: the exercises come after the summary"


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


def test_the_quick_loop_leaves_out_the_process_and_fault_tests():
    import subprocess
    files = [str(ROOT / "tests" / f"test_{name}.py") for name in ("training", "parallel", "faults", "without_d2l")]
    out = subprocess.run([sys.executable, "-m", "pytest", *files, "--collect-only", "-q", "-m", "not slow"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    quick = out.stdout
    assert out.returncode == 0 and "test_training.py::test_noam_lr_rises_linearly" in quick, out.stdout[-500:]
    for slow in ("test_faults.py::", "test_without_d2l.py::",
                 "test_training.py::test_cli_trains_translates_and_evaluates_english_german",
                 "test_parallel.py::test_two_gloo_processes"):
        assert slow not in quick, slow


LINK = re.compile(r"\]\(([^)\s]+)\)")                    # [text](target)
BOOK_SOURCES = (ROOT / "book", ROOT / "notebooks")  # the book is built from these, flattened (Makefile)


def relative_links(text: str) -> list[str]:
    """The link targets of Markdown text that point into the repository (no scheme, not a bare #anchor)."""
    targets = [m.group(1).split("#")[0] for m in LINK.finditer(text)]
    return [t for t in targets if t and not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def toctree_entries(text: str) -> list[str]:
    """The documents a MyST toctree names (its lines that are not options)."""
    blocks = re.findall(r"```\{toctree\}\n(.*?)```", text, re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip() and not line.startswith(":")]


def test_every_relative_link_of_the_readme_and_the_book_resolves():
    broken = [f"README.md -> {t}" for t in relative_links((ROOT / "README.md").read_text()) if not (ROOT / t).exists()]
    for page in sorted((ROOT / "book").glob("*.md")):
        text = page.read_text()
        for target in relative_links(text):
            in_book = target.startswith("solutions/") and (ROOT / target).exists()   # the book's solutions/
            if not in_book and not any((base / target).exists() for base in BOOK_SOURCES):
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
        for entry in toctree_entries(text):                  # a name or a glob, without its suffix
            bases = BOOK_SOURCES + ((ROOT,) if entry.startswith("solutions/") else ())
            if not any(list(base.glob(entry + suffix)) for base in bases for suffix in ("", ".md", ".ipynb")):
                broken.append(f"{page.relative_to(ROOT)} toctree -> {entry}")
    assert broken == []


def test_the_link_parsers_find_repository_links_and_toctree_entries():
    assert relative_links("see [the data](notebooks/01_data.ipynb#top) and [x](https://a.b) [y](#here)") == \
        ["notebooks/01_data.ipynb"]
    assert toctree_entries("```{toctree}\n:maxdepth: 1\n\nteachers\nsolutions/*\n```") == ["teachers", "solutions/*"]


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
