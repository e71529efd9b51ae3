#!/usr/bin/env python3
"""Write the assignments' student edition, assignments/*.ipynb, from their nbgrader
sources: the executed model answers in solutions/assignments/. `nbgrader
generate_assignment` turns every solution region and written answer into a stub, clears
the outputs and locks the cells a student must not edit; the cells tagged `teacher-only`
(the model answers' banner, the concept questions' key, the verdicts under A3's table)
are left out.

    # or: make release
    python tools/release.py
    # fail when assignments/ is not what the sources give
    python tools/release.py --check
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES, RELEASE = ROOT / "solutions" / "assignments", ROOT / "assignments"
CONFIG = """c.ClearSolutions.code_stub = {"python": "# your code here"}
c.ClearSolutions.text_stub = "*Your answer here.*"
"""


def released(source: Path, course: Path) -> str:
    """The student edition of one source notebook, as its file's text; `course` is an
    empty folder to work in."""
    assignment = source.stem.split("_")[0]  # A1_attention -> A1
    (course / "source" / assignment).mkdir(parents=True)
    (course / "source" / assignment / source.name).write_bytes(source.read_bytes())
    (course / "nbgrader_config.py").write_text(CONFIG)
    command = [sys.executable, "-m", "nbgrader", "generate_assignment", assignment]
    command += ["--force", "--no-db", f"--CourseDirectory.root={course}"]
    run = subprocess.run(command, cwd=course, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(
            f"release: nbgrader could not release {source.name}:\n{run.stderr[-3000:]}"
        )
    nb = json.loads(
        (course / "release" / assignment / source.name).read_text(encoding="utf-8")
    )
    nb["cells"] = [
        c for c in nb["cells"] if "teacher-only" not in c["metadata"].get("tags", [])
    ]
    for cell in nb["cells"]:
        cell["metadata"].pop("execution", None)  # when the model answer's cells ran
    nb["metadata"].pop("nmt_course", None)  # the model answer's record of its own run
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="only check that assignments/ is up to date",
    )
    args = parser.parse_args(argv)
    stale = []
    with tempfile.TemporaryDirectory(prefix="nmt-release-") as work:
        for source in sorted(SOURCES.glob("A*.ipynb")):
            (course := Path(work) / source.stem).mkdir()
            text, target = released(source, course), RELEASE / source.name
            if target.is_file() and target.read_text(encoding="utf-8") == text:
                continue
            stale.append(target.name)
            if not args.check:
                target.with_suffix(".tmp").write_text(text, encoding="utf-8")
                target.with_suffix(".tmp").replace(target)
    if args.check and stale:
        print(
            f"release: {', '.join(stale)} differ from what solutions/assignments/"
            " gives: run make release"
        )
        return 1
    print(
        "release:"
        f" {'wrote ' + ', '.join(stale) if stale else 'assignments/ is up to date'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
