"""The exporter: nmt_lib/ must match the notebooks, and the check must notice when it
does not."""

import ast
import shutil
import subprocess
import sys

import export_lib
from conftest import ROOT, write_notebook


def make_project(tmp_path, *sources):
    """A checkout in `tmp_path` whose one notebook has a code cell per source."""
    (tmp_path / "notebooks").mkdir(exist_ok=True)
    (tmp_path / "nmt_lib").mkdir(exist_ok=True)
    (tmp_path / "nmt_lib" / "__init__.py").write_text('"""hand-written"""\n')
    write_notebook(tmp_path / "notebooks" / "01_demo.ipynb", *sources)
    return tmp_path


def run_check(root):
    check = [
        sys.executable,
        ROOT / "tools" / "export_lib.py",
        "--check",
        "--root",
        root,
    ]
    return subprocess.run(check, capture_output=True, text=True)


def test_repository_library_matches_notebooks():
    result = run_check(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_names_stale_missing_and_orphaned_files(tmp_path):
    root = make_project(tmp_path, "#| default_exp demo", "#| export\nY = 1")
    export_lib.main(["--root", str(root)])
    demo = root / "nmt_lib" / "demo.py"
    demo.write_text(demo.read_text() + "Y = 3\n")
    result = run_check(root)
    assert result.returncode == 1 and "demo.py (differs" in result.stdout
    shutil.copy(demo, root / "nmt_lib" / "old.py")
    demo.unlink()
    result = run_check(root)
    assert result.returncode == 1 and "demo.py (missing)" in result.stdout
    assert "old.py (generated" in result.stdout
    # Hand-written files never count as stale.
    assert "__init__" not in result.stdout


def test_a_lesson_imports_only_its_own_or_earlier_chapters():
    assert export_lib.forward_imports(ROOT) == []


def test_no_import_runs_from_a_lower_layer_to_a_higher_one():
    """Base below lessons below tooling: a lesson reaches the tooling through no
    module."""
    assert export_lib.layer_violations(ROOT) == []


def test_the_lessons_hold_no_tooling():
    """The command line, locks and signals live in nmt_lib/run/; chapter 0 teaches no
    code."""
    for path in export_lib.generated_files(ROOT):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
        assert not imported & {"argparse", "signal", "fcntl"}, path.name
    assert export_lib.exports_of(ROOT / "notebooks" / "00_course.ipynb") == []
