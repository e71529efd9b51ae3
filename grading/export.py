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

ORDER = {
    "points": 0,
    "writeup": 1,
    "written": 2,
    "concepts": 3,
}  # the kinds of grade cell, as the sources
# place them


def position(cell: str) -> tuple:
    """Where a grade cell's column goes: its kind (`ORDER`), then its number."""
    _, kind, *number = cell.split("-") + [""]
    return (
        ORDER.get(kind, len(ORDER)),
        int(number[0]) if number[0].isdigit() else 0,
        cell,
    )


def label(cell: str) -> str:
    """A grade cell's column: its name, with the task's name for the cells the sandbox
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
                try:
                    gradebook.find_submission(assignment.name, student.id)
                except MissingEntry:
                    rows.append(
                        {
                            "student": student.id,
                            "assignment": assignment.name,
                            "status": "not submitted",
                        }
                    )
                    continue
                row = {
                    "student": student.id,
                    "assignment": assignment.name,
                    "status": "submitted",
                }
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
                row["points"], row["out of"] = (
                    total,
                    sum(
                        gradebook.find_grade_cell(
                            cell, notebook, assignment.name
                        ).max_score
                        for notebook, cell in cells
                    ),
                )
                rows.append(row)
        header += ["points", "out of"]
        with open(dest + ".tmp", "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, header)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(dest + ".tmp", dest)
        self.log.info("wrote %d rows to %s", len(rows), dest)
