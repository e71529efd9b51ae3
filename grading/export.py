"""nbgrader's export with a column per graded cell: one CSV row per student and
assignment, with the points of each task, written problem and concept-question cell, and
the total. nbgrader's own CSV export gives only the total of each assignment.

    # in the course folder, this repository on PYTHONPATH (tools/grade.py does it)
    nbgrader export --exporter=grading.export.TaskCsv --to grades.csv
"""

import csv
import os

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins import ExportPlugin

from grading.hidden import ASSIGNMENTS, parts

# the kinds of grade cell, as the sources place them
ORDER = {"points": 0, "writeup": 1, "written": 2, "concepts": 3}


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
        rows, header = [], ["student", "assignment", "status"]
        for assignment in gradebook.assignments:
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
                try:
                    gradebook.find_submission(assignment.name, student.id)
                except MissingEntry:
                    rows.append({**row, "status": "not submitted"})
                    continue
                row["status"] = "submitted"
                total = 0.0
                for notebook, cell in cells:
                    grade = gradebook.find_grade(
                        cell, notebook, assignment.name, student.id
                    )
                    # a written answer not graded yet: 0
                    row[label(cell)] = grade.score or 0.0
                    total += grade.score or 0.0
                    if grade.needs_manual_grade:
                        row["status"] = "needs manual grading"
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
