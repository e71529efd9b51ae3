#!/usr/bin/env python3
"""Render the tables of the README, the teacher's guide and the book from what was
measured; prose is written.

    # rewrite the tables between their <!-- NAME:start/end --> markers
    python tools/render_tables.py
    # exit 1, naming each file whose tables differ from their sources
    python tools/render_tables.py --check

The sources: the executed notebooks (title, "**In this chapter:**" line, wall time, and
the figures and tables `tools/run_course.py` stored in their metadata) and the records
(`records/*.json`, `bench/results/latest.json`).
"""

import argparse
import json
import re
import sys
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from nmt_lib.run.inference import search_name

ROOT = Path(__file__).resolve().parent.parent
# the pages with tables, each between its <!-- NAME:start --> and <!-- NAME:end -->
PAGES = (
    "README.md",
    "book/teachers.md",
    "book/results.md",
    "book/benchmarks.md",
    "book/speedrun.md",
    "book/command-line.md",
)
LEAD = "**In this chapter:**"
# The ten-week plan's study estimate (the guide states the method): prose read at this
# pace, code cells' lines at this one, the part's cells and each exercise's solution
# cells run as long as they took executed, each exercise written in this many minutes.
WORDS_PER_MINUTE, CODE_LINES_PER_MINUTE, MINUTES_PER_EXERCISE = 150, 10, 20


def when(stamp: str) -> datetime:
    """A time stamp of nbclient's cell metadata (ISO 8601, UTC written as Z)."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def chapter(path: Path) -> dict:
    """What a row shows of one executed notebook."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    lines = [
        line
        for c in nb["cells"]
        if c["cell_type"] == "markdown"
        for line in "".join(c["source"]).splitlines()
    ]
    title = next(
        (line[2:].strip() for line in lines if line.startswith("# ")), path.stem
    )
    lead = next(
        (line[len(LEAD) :].strip() for line in lines if line.startswith(LEAD)), None
    )
    stamps = [
        c.get("metadata", {}).get("execution", {})
        for c in nb["cells"]
        if c["cell_type"] == "code"
    ]
    busy = [s["iopub.status.busy"] for s in stamps if "iopub.status.busy" in s]
    idle = [s["iopub.status.idle"] for s in stamps if "iopub.status.idle" in s]
    wall = (
        (when(max(idle)) - when(min(busy))).total_seconds() if busy and idle else None
    )
    meta = nb.get("metadata", {}).get("nmt_course", {})
    return {
        "path": path,
        "title": title,
        "lead": lead,
        "wall": wall,
        "headlines": meta.get("headlines", []),
        "executed": meta.get("executed"),
        "cpu": meta.get("cpu"),
        "mode": meta.get("mode"),
    }


def record(root: Path, name: str) -> dict:
    path = root / name
    if not path.exists():
        raise SystemExit(
            f"render_tables: {name} is missing; the command that measures it writes it"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def figure(value) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"


def score(x: float) -> str:
    """A score to one decimal, halves rounded up, as a reader rounds the two-decimal
    figure a run printed."""
    return str(Decimal(str(x)).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def duration(seconds) -> str:
    if seconds is None:
        return "not executed"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def ran_on(ch: dict) -> str:
    return f"{ch['executed']}, {ch['cpu']}" if ch["executed"] else "not recorded"


def machine(rec: dict) -> str:
    m = rec.get("machine") or {}
    return (
        f"{str(rec.get('recorded', 'not recorded'))[:10]},"
        f" {m.get('gpu') or m.get('cpu') or 'not recorded'}"
    )


def markdown(text: str) -> str:
    """A token such as <unk> in code style, so that Markdown does not take it for an
    HTML tag."""
    return re.sub(r"(?<!`)<(\w+)>(?!`)", r"`<\1>`", str(text))


def table(header: list[str], rows: list, align: str = "") -> str:
    """A Markdown table; `align` holds one letter per column, r for right-aligned (the
    rest left)."""
    rule = (
        "|"
        + "|".join("---:" if a == "r" else "---" for a in align.ljust(len(header), "l"))
        + "|"
    )
    # \| stays in its cell
    line = lambda cells: (
        "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
    )
    return "\n".join([line(header), rule, *map(line, rows)])


def headlines(ch: dict, key_only: bool = False) -> str:
    """A chapter's headline figures, as `name: value; ...` (its key ones only, if asked
    and it marked any)."""
    shown = [h for h in ch["headlines"] if "value" in h]
    if key_only and any(h.get("key") for h in shown):
        shown = [h for h in shown if h.get("key")]
    return markdown("; ".join(f"{h['name']}: {figure(h['value'])}" for h in shown))


def chapter_table(chapters: list[dict], columns: dict, align: str = "lr") -> str:
    """A row per notebook: `columns` maps each header to its cell for a chapter."""
    rows = [[cell(ch) for cell in columns.values()] for ch in chapters]
    return table(list(columns), rows, align)


def readme_table(chapters: list[dict]) -> str:
    for ch in chapters:
        if ch["lead"] is None:
            raise SystemExit(
                f"render_tables: {ch['path'].name} has no '{LEAD} ...' line under its"
                " title"
            )
    columns = {
        "chapter": lambda ch: f"[{ch['title']}](notebooks/{ch['path'].name})",
        "what you learn": lambda ch: markdown(ch["lead"]),
        "time": lambda ch: duration(ch["wall"]),
        "headline figures": lambda ch: headlines(ch, key_only=True),
    }
    where = sorted({ran_on(ch) for ch in chapters})
    return (
        chapter_table(chapters, columns, "llr")
        + f"\n\n*Learner mode, executed {'; '.join(where)}.*"
    )


def guide_table(chapters: list[dict], heading: str, figures: bool = False) -> str:
    """Each notebook's time to run and where it ran; with `figures`, its title linked
    and its headline figures."""
    columns = {
        heading: lambda ch: (
            f"[{ch['title']}]({ch['path'].name})" if figures else ch["title"]
        ),
        "time (learner mode)": lambda ch: duration(ch["wall"]),
        **({"headline figures": headlines} if figures else {}),
        "executed on": ran_on,
    }
    return chapter_table(chapters, columns)


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


def notebook_table(ch: dict, name: str) -> str:
    """A table a chapter recorded (`record_table`): a row per model."""
    t = next(
        (h for h in ch["headlines"] if h.get("name") == name and "rows" in h), None
    )
    if t is None:
        raise SystemExit(
            f"render_tables: {ch['path'].name} recorded no table {name!r}; execute it"
            " with run_course"
        )
    rows = [[label, *map(figure, values)] for label, *values in t["rows"]]
    return (
        table(["model", *t["columns"]], rows, "l" + "r" * len(t["columns"]))
        + f"\n\n*Chapter {int(ch['path'].stem[:2])}, learner mode, executed"
        f" {ran_on(ch)}.*"
    )


def record_tables(rec: dict) -> str:
    """A record's own tables (`tables`: columns, rows, align), under its caption, or its
    command and machine."""
    shown = [
        table(
            t["columns"],
            [[markdown(figure(c)) for c in r] for r in t["rows"]],
            t.get("align", ""),
        )
        for t in rec["tables"]
    ]
    return (
        "\n\n".join(shown)
        + "\n\n*"
        + (rec.get("caption") or f"`{rec['command']}` on {machine(rec)}")
        + ".*"
    )


def public_results(ours: list[dict], others: dict, card: str | None = None) -> str:
    """Our published model on the public Tatoeba test beside the scores others
    published, then the test's facts: its size, the signatures, and the overlap with our
    corpus that was left out of training.
    """
    rows = []
    for rec in ours:
        search = search_name(rec["beam"], rec["alpha"])
        rows.append(
            [
                f"**{f'[ours]({card})' if card else 'ours'}, {search}**",
                f"{rec['model']['parameters']:,}",
                "Tatoeba's own English–French pairs, the test's sentences left out",
                f"**{score(rec['sacrebleu'])}**",
                f"**{score(rec['chrf'])}**",
            ]
        )
    rows += [
        [
            r["system"] + (f" ({r['model']})" if r.get("model") else ""),
            r["parameters"],
            r["data"],
            f"{r['sacrebleu']:.1f}",
            "–" if r["chrf"] is None else f"{r['chrf']:.1f}",
        ]
        for r in others["rows"]
    ]
    first, ex = ours[0], ours[0]["data"]["excluded"]
    facts = [
        [
            "test set, one reference each",
            f"`{first['split']}`, {first['sentences']:,} pairs",
        ],
        [
            "our scores",
            (
                f"`evaluate --test tatoeba` on {machine(first)}, after "
                f"{duration(first['training']['seconds'])} of training"
            ),
        ],
        ["sacreBLEU signature", f"`{first['signature']}`"],
        ["chrF signature", f"`{first['chrf_signature']}`"],
        [
            (
                "test pairs sharing a sentence with our corpus: as written, Unicode and"
                " spaces unified"
            ),
            (
                f"{ex['test_pairs_in_corpus_exactly']:,} and"
                f" {ex['test_pairs_in_corpus']:,} of {ex['test_pairs']:,}"
            ),
        ],
        [
            "our training and validation pairs left out for sharing one",
            f"{ex['train']:,} and {ex['valid']:,}",
        ],
        ["the others' scores", f"transcribed {others['transcribed']}"],
    ]
    return (
        table(["system", "parameters", "trained on", "BLEU", "chrF"], rows, "lrlrr")
        + "\n\n"
        + table(["", ""], facts)
    )


def rendered(text: str, marker: str, content: str, name: str) -> str:
    """`text` with the block between `<!-- marker:start -->` and `<!-- marker:end -->`
    replaced by `content`."""
    pattern = re.compile(
        rf"(<!-- {marker}:start -->\n)(?:.*?\n)?(<!-- {marker}:end -->)", re.S
    )
    if not pattern.search(text):
        raise SystemExit(
            f"render_tables: {name} has no <!-- {marker}:start --> ... <!--"
            f" {marker}:end --> block"
        )
    return pattern.sub(lambda m: m.group(1) + content + "\n" + m.group(2), text)


def render(root: Path = ROOT) -> dict[str, tuple[str, str]]:
    """For each file with tables: (its text now, its text with the tables rendered from
    the notebooks)."""
    chapters = [chapter(p) for p in sorted((root / "notebooks").glob("*.ipynb"))]
    solutions = [
        chapter(p)
        for p in [
            *sorted((root / "solutions").glob("*.ipynb")),
            *sorted((root / "solutions" / "assignments").glob("*.ipynb")),
        ]
    ]
    by_stem = lambda stem: next(c for c in chapters if c["path"].stem == stem)
    rec = lambda name: record(root, f"records/{name}.json")
    ours = lambda: [rec("tatoeba-test-greedy"), rec("tatoeba-test-beam4")]
    plan = lambda: json.loads(
        (root / "book" / "module_plan.json").read_text(encoding="utf-8")
    )
    tables = {
        "chapter-table": lambda: readme_table(chapters),
        "chapter-times": lambda: guide_table(chapters, "chapter"),
        "module-plan": lambda: plan_table(chapters, plan()["sessions"], False),
        "ten-week-plan": lambda: (
            plan_table(chapters, plan()["ten_weeks"]["sessions"], True, root)
            + "\n\n"
            + assignment_table(
                plan()["ten_weeks"]["sessions"], plan()["ten_weeks"]["assignments"]
            )
        ),
        "solution-times": lambda: guide_table(solutions, "solutions notebook"),
        "learner-results": lambda: notebook_table(
            by_stem("08_evaluation"), "held-out results"
        ),
        "chapter-figures": lambda: guide_table(chapters, "chapter", figures=True),
        "benchmark": lambda: record_tables(record(root, "bench/results/latest.json")),
        "tatoeba-results": lambda: public_results(
            ours(), rec("tatoeba-others"), card="models/tatoeba-en-fr/README.md"
        ),
        "tatoeba-public": lambda: public_results(ours(), rec("tatoeba-others")),
        "modern-switches": lambda: notebook_table(
            by_stem("12_modern"), "modern-switches"
        ),
    }  # the other markers: the tables of records/MARKER.json
    out = {}
    for name in PAGES:
        text = new = (root / name).read_text(encoding="utf-8")
        for marker in re.findall(r"^<!-- ([\w-]+):start -->$", text, re.M):
            content = tables.get(marker, lambda: record_tables(rec(marker)))()
            new = rendered(new, marker, content, name)
        out[name] = (text, new)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 if a table is out of date",
    )
    args = parser.parse_args(argv)
    pages = render()
    stale = [name for name, (now, new) in pages.items() if now != new]
    if args.check and stale:
        print(
            "render_tables: out of date with the notebooks and records:"
            f" {', '.join(stale)}; run python tools/render_tables.py"
        )
        return 1
    for name in stale:
        (ROOT / name).write_text(pages[name][1], encoding="utf-8")
    print(
        ("rewrote " + ", ".join(stale))
        if stale
        else "tables match the notebooks and the records"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
