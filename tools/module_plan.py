"""The module plans of the teacher's guide (book/module_plan.json) as tables: each
session's chapters or parts of them, its measured run time and estimated study hours,
homework, and assignments released and due. `tools/render_tables.py` renders them, and
`tools/slides.py` builds a lecture per session from the same plan.
"""

import json
import re
from pathlib import Path

from render_tables import ROOT, duration, table, when

# The ten-week plan's study estimate (the guide states the method): prose read at this
# pace, code cells' lines at this one, the part's cells and each exercise's solution
# cells run as long as they took executed, each exercise written in this many minutes.
WORDS_PER_MINUTE, CODE_LINES_PER_MINUTE, MINUTES_PER_EXERCISE = 150, 10, 20


def cell_seconds(cell: dict) -> float:
    """How long a code cell ran (0 for one never executed)."""
    e = cell.get("metadata", {}).get("execution", {})
    if cell["cell_type"] != "code" or "shell.execute_reply" not in e:
        return 0.0
    return (
        when(e["shell.execute_reply"]) - when(e["iopub.execute_input"])
    ).total_seconds()


def chapter_part(path: Path, start: str | None, until: str | None) -> tuple:
    """The prose words, the code cells' non-blank lines and the cells' run time (s) of
    one executed notebook, from its section headed `start` (none: the beginning) to the
    one headed `until` (none: the end); a section is named by its heading's start.
    """
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]

    def heading(name: str) -> int:  # the cell that opens the section `name`
        found = [
            i
            for i, c in enumerate(cells)
            if c["cell_type"] == "markdown"
            and any(
                line.startswith("## " + name)
                for line in "".join(c["source"]).splitlines()
            )
        ]
        if not found:
            raise SystemExit(
                f"render_tables: {path.name} has no section headed {name!r}"
            )
        return found[0]

    part = cells[
        heading(start) if start else 0 : heading(until) if until else len(cells)
    ]
    text = lambda kind: ["".join(c["source"]) for c in part if c["cell_type"] == kind]
    words = sum(len(s.split()) for s in text("markdown"))
    lines = sum(1 for s in text("code") for line in s.splitlines() if line.strip())
    return words, lines, sum(map(cell_seconds, part))


def exercise_seconds(root: Path, number: str, exercises: list[int]) -> list[float]:
    """The run time (s) of each of a chapter's `exercises`: the cells under its
    `## Exercise N` heading in the executed solutions notebook (0 when it has none: the
    exercise is written, not run); an exercise the chapter lacks stops the render."""
    nb = lambda folder: json.loads(
        next((root / folder).glob(f"{number}_*.ipynb")).read_text(encoding="utf-8")
    )["cells"]
    whole = "\n".join("".join(c["source"]) for c in nb("notebooks"))
    listed = whole[whole.find("## Exercises") :].split("\n## ")[0]
    numbers = re.findall(r"^(\d+)\. ", listed, re.M)
    if missing := set(map(str, exercises)) - set(numbers):
        raise SystemExit(
            f"render_tables: the plan names exercises {sorted(missing)} of chapter"
            f" {number}, which has none such"
        )
    seconds, current = {}, None
    for c in nb("solutions"):  # a `## ` heading starts an exercise, or ends one
        text = "".join(c["source"]) if c["cell_type"] == "markdown" else ""
        if heads := re.findall(r"^## (Exercise (\d+))?", text, re.M):
            current = heads[-1][1]
        seconds[current] = seconds.get(current, 0.0) + cell_seconds(c)
    return [seconds.get(str(n), 0.0) for n in exercises]


def label(number: str) -> str:
    """A chapter's number as the guide writes it: 04a as 4a."""
    return number.lstrip("0") or "0"


def homework(s: dict) -> str:
    """A ten-week session's homework: its exercises by chapter, then the plan's."""
    parts = [
        f"chapter {label(n)}, exercise{'s' * (len(e) > 1)} {', '.join(map(str, e))}"
        for n, e in s.get("exercises", {}).items()
    ]
    return "; ".join(parts + [s.get("homework", "")] * bool(s.get("homework"))) or "-"


def assignments(s: dict, side: str) -> str:
    return ", ".join(f"assignment {a[1:]}" for a in s.get(side, [])) or "-"


def session_parts(s: dict) -> list[tuple[str, str | None, str | None]]:
    """(chapter, from, until) for each chapter of a ten-week session: its first chapter
    read from the section `from`, its last up to the section `until`, the rest whole."""
    last = len(s["chapters"]) - 1
    return [
        (n, s.get("from") if i == 0 else None, s.get("until") if i == last else None)
        for i, n in enumerate(s["chapters"])
    ]


def reading(s: dict) -> str:
    """The part a ten-week session reads, as the guide writes it."""
    side = lambda word, name: f' {word} "{name}"' if name else ""
    return ", ".join(
        label(n) + side("from", a) + side("until", b) for n, a, b in session_parts(s)
    )


def ten_week_row(root: Path, by_number: dict, s: dict) -> tuple[dict, ...]:
    """The ten-week plan's columns of one session: the part read, its words, code lines
    and run time, the exercises' run time, and the estimated study hours."""
    parts = [chapter_part(by_number[n]["path"], a, b) for n, a, b in session_parts(s)]
    words, lines, seconds = (sum(column) for column in zip((0, 0, 0.0), *parts))
    done = s.get("exercises", {}).items()
    runs = [t for n, e in done for t in exercise_seconds(root, n, e)]
    minutes = (
        words / WORDS_PER_MINUTE
        + lines / CODE_LINES_PER_MINUTE
        + (seconds + sum(runs)) / 60
        + MINUTES_PER_EXERCISE * len(runs)
    )
    first = {"reading": reading(s) or "-"}
    middle = {
        "prose words": f"{words:,}" if words else "-",
        "code lines": f"{lines:,}" if lines else "-",
        "time to run": duration(seconds) if seconds else "-",
        "exercises' run": duration(sum(runs)) if runs else "-",
    }
    last = {
        "released": assignments(s, "released"),
        "estimated study": f"{minutes / 60:.1f} h" if minutes else "-",
    }
    return first, middle, last


def assignment_table(sessions: list[dict], about: dict) -> str:
    """Each assignment's release and due session (with its week), and the hours learners
    were measured to spend on it (the plan's `hours`; none: not yet measured). An
    assignment released where another is due, or not due after its release, stops it."""
    at, number = {"released": {}, "due": {}}, 0
    for s in sessions:
        number += not s.get("optional")
        for side, found in at.items():
            found.update({a: (number, s["week"]) for a in s.get(side, [])})
    if clash := {n for n, _ in at["due"].values()} & {
        n for n, _ in at["released"].values()
    }:
        raise SystemExit(
            f"render_tables: session {min(clash)} releases where one is due"
        )
    rows = []
    for name, a in about.items():
        (r, r_week), (d, d_week) = (at[side].get(name, (0, 0)) for side in at)
        if d <= r:
            raise SystemExit(
                f"render_tables: {name} needs a release, and later a due date"
            )
        hours = "not yet measured" if a.get("hours") is None else f"{a['hours']:g} h"
        rows.append(
            [f"{name}. {a['title']}", f"session {r} (week {r_week})"]
            + [f"session {d} (week {d_week})", f"{d_week - r_week} weeks", hours]
        )
    header = ["assignment", "released", "due", "open", "hours a learner spent"]
    return table(header, rows, "lllrr")


def plan_table(
    chapters: list[dict], sessions: list[dict], ten_weeks: bool, root: Path = ROOT
) -> str:
    """A plan of the teacher's guide, a row per session: its chapters with their time to
    run, in the ten-week plan the part read, its prose words and code lines, the
    exercises' run time and the estimated study hours; the rest is the plan's."""
    by_number = {ch["path"].stem.split("_")[0]: ch for ch in chapters}
    rows, number = [], 0
    for s in sessions:
        missing = [n for n in s["chapters"] if n not in by_number]
        if missing:
            raise SystemExit(
                f"render_tables: book/module_plan.json names chapters {missing} that"
                " have no notebook"
            )
        number += not s.get("optional")
        if ten_weeks:
            first, middle, last = ten_week_row(root, by_number, s)
        else:
            names = ", ".join(map(label, s["chapters"]))
            walls = [by_number[n]["wall"] for n in s["chapters"]]
            first, last = {"chapters": names}, {"reading": s["reading"]}
            middle = {
                "time to run": (
                    duration(sum(walls)) if None not in walls else "not executed"
                ),
                "planned study": f"{s['study_h']:g} h",
            }
        rows.append(
            {
                "week": s["week"],
                "session": "optional" if s.get("optional") else number,
                **first,
                "outcomes": s["outcomes"],
                **middle,
                "in class": s["demo"],
                "homework": homework(s) if ten_weeks else s["homework"],
                "due": assignments(s, "due") if ten_weeks else s["due"] or "-",
                **last,
            }
        )
    return table(list(rows[0]), [list(r.values()) for r in rows], "rrllrrrr")
