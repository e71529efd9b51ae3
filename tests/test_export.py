"""The exporter: nmt_lib/ must match the notebooks, and the check must notice when it
does not."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import export_lib

ROOT = Path(__file__).resolve().parent.parent


def notebook(cells):
    return {
        "cells": [
            {
                "cell_type": kind,
                "metadata": {},
                "source": src,
                **({"outputs": [], "execution_count": 1} if kind == "code" else {}),
            }
            for kind, src in cells
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def make_project(tmp_path, cells, name="01_demo.ipynb"):
    (tmp_path / "notebooks").mkdir(exist_ok=True)
    (tmp_path / "nmt_lib").mkdir(exist_ok=True)
    (tmp_path / "nmt_lib" / "__init__.py").write_text('"""hand-written"""\n')
    (tmp_path / "notebooks" / name).write_text(json.dumps(notebook(cells)))
    return tmp_path


def run_check(root):
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "export_lib.py"),
            "--check",
            "--root",
            str(root),
        ],
        capture_output=True,
        text=True,
    )


def test_repository_library_matches_notebooks():
    result = run_check(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_names_stale_missing_and_orphaned_files(tmp_path):
    root = make_project(
        tmp_path, [("code", "#| default_exp demo"), ("code", "#| export\nY = 1")]
    )
    export_lib.main(["--root", str(root)])
    (root / "nmt_lib" / "demo.py").write_text(
        (root / "nmt_lib" / "demo.py").read_text() + "Y = 3\n"
    )
    result = run_check(root)
    assert (
        result.returncode == 1
        and "nmt_lib/demo.py (differs from its notebooks)" in result.stdout
    )

    shutil.copy(root / "nmt_lib" / "demo.py", root / "nmt_lib" / "old.py")
    (root / "nmt_lib" / "demo.py").unlink()
    result = run_check(root)
    assert result.returncode == 1
    assert "nmt_lib/demo.py (missing)" in result.stdout
    assert (
        "nmt_lib/old.py (generated, but no notebook exports it any more)"
        in result.stdout
    )
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
    import ast

    for path in export_lib.generated_files(ROOT):
        tree = ast.parse(path.read_text())
        imported = {
            a.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for a in node.names
        }
        imported |= {
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
        }
        assert not {name.split(".")[0] for name in imported} & {
            "argparse",
            "signal",
            "fcntl",
        }, path.name
    assert export_lib.exports_of(ROOT / "notebooks" / "00_course.ipynb") == []
