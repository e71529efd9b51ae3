"""nbgrader's export with a column per graded cell: one CSV row per student and
assignment, with the points of each task, written problem and concept-question cell, and
the total; its status (graded, or why not) and the cells a teacher should read, as
tools/grade.py left them in the course folder (grading-A1.json). nbgrader's own CSV
export gives only the total of each assignment.

    # in the course folder, this repository on PYTHONPATH (tools/grade.py does it)
    nbgrader export --exporter=grading.export.TaskCsv --to grades.csv
"""

import csv
import json
import os
import re
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins import ExportPlugin

from grading.hidden import ASSIGNMENTS, parts

# the kinds of grade cell, as the sources place them
ORDER = {"points": 0, "writeup": 1, "written": 2, "concepts": 3}


# what a teacher reads a notebook for: code that can reach around the sandbox, by name
# (names built from strings need getattr, vars or globals, which are named too),
# shell and magic lines (but %matplotlib), and a path that leaves the notebook's folder
SUSPECT = re.compile(
    r"(?<![\w.])(?:exec|eval|compile|importlib|__import__|sys\.modules|gc|inspect|ctypes"
    r"|thread\w*|_thread|multiprocessing|subprocess|signal|sys\.prefix|getattr|setattr"
    r"|vars|globals|os\.(?:system|kill\w*|fork|exec\w*|spawn\w*|(?:sym)?link|sep|pardir)"
    r"|torch\._C|torch\.ops|torch\.library|get_ipython)\b"
    r"|\b(?:input_transformers\w*|events\.register|__dict__|symlink_to|hardlink_to)\b"
    r"|^\s*(?:!|%(?!matplotlib))|(?<![\w.])open\(|['\"](?:/|\.\./|~)"
)


# what is not a notebook: unreadable, not JSON, no cells, or cells not of text
NOT_A_NOTEBOOK = (OSError, ValueError, KeyError, TypeError)


def cells(notebook: Path) -> list[tuple[str, str]]:
    """Each cell of `notebook` as (its type, its source); one of `NOT_A_NOTEBOOK` for a
    file that is not a notebook (a submission's file is read without trusting it)."""
    found = json.loads(Path(notebook).read_text(encoding="utf-8"))["cells"]
    sources = [(c["cell_type"], c["source"]) for c in found]
    return [(t, "".join(s) if isinstance(s, list) else s + "") for t, s in sources]


def to_read(notebook: Path) -> str:
    """The code cells and lines of `notebook` that use what `SUSPECT` names, for the
    teacher to read ("cell 3, line 2: exec"); they do not change the points."""
    try:
        code = [source for kind, source in cells(notebook) if kind == "code"]
    except NOT_A_NOTEBOOK:
        return "not a notebook: read the file"
    found = []
    for i, source in enumerate(code):
        for n, line in enumerate(source.splitlines(), 1):
            what = sorted({m.group(0).strip() for m in SUSPECT.finditer(line)})
            if what:
                found.append(f"code cell {i + 1}, line {n}: {' '.join(what)}")
    return "; ".join(found)


def position(cell: str) -> tuple:
    """Where a grade cell's column goes: its kind (`ORDER`), then its number."""
    _, kind, *number = cell.split("-") + [""]
    n = int(number[0]) if number[0].isdigit() else 0
    return ORDER.get(kind, len(ORDER)), n, cell


def label(cell: str) -> str:
    """A grade cell's column: its name, and the task's for the cells the sandbox
    scores."""
    assignment, kind, *number = cell.split("-")
    if kind == "points" and assignment in ASSIGNMENTS:
        return f"{cell}: {parts(assignment)[int(number[0]) - 1][0]}"
    return cell


class TaskCsv(ExportPlugin):
    """One row per student and assignment: each graded cell's points in the source's
    order, and the total."""

    def export(self, gradebook: Gradebook) -> None:
        dest = self.to or "grades.csv"
        rows, header = [], ["student", "assignment", "status", "to read"]
        root = Path(gradebook.engine.url.database).parent
        for assignment in gradebook.assignments:
            side = root / f"grading-{assignment.name}.json"
            side = json.loads(side.read_text()) if side.exists() else {}
            if self.assignment and assignment.name not in self.assignment:
                continue
            cells = [
                (nb.name, cell.name)
                for nb in assignment.notebooks
                for cell in sorted(nb.grade_cells, key=lambda c: position(c.name))
            ]
            header += [label(cell) for _, cell in cells if label(cell) not in header]
            for student in gradebook.students:
                if self.student and student.id not in self.student:
                    continue
                row = {"student": student.id, "assignment": assignment.name}
                graded = side.get(student.id, {"status": "submitted"})
                row |= {"to read": graded.get("to read", "")}
                try:
                    gradebook.find_submission(assignment.name, student.id)
                except MissingEntry:
                    why = graded["status"] if student.id in side else "not submitted"
                    rows.append({**row, "status": why})
                    continue
                row["status"] = graded["status"]
                total = 0.0
                for notebook, cell in cells:
                    grade = gradebook.find_grade(
                        cell, notebook, assignment.name, student.id
                    )
                    # a written answer not graded yet: 0
                    row[label(cell)] = grade.score or 0.0
                    total += grade.score or 0.0
                    if grade.needs_manual_grade and row["status"] == "graded":
                        row["status"] += "; needs manual grading"
                out_of = sum(
                    gradebook.find_grade_cell(cell, nb, assignment.name).max_score
                    for nb, cell in cells
                )
                row["points"], row["out of"] = total, out_of
                rows.append(row)
        header += ["points", "out of"]
        with open(dest + ".tmp", "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, header)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(dest + ".tmp", dest)
        self.log.info("wrote %d rows to %s", len(rows), dest)
