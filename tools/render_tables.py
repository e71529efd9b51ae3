#!/usr/bin/env python3
"""Render the README's chapter table and the teacher's guide's table of times from the executed notebooks.

    python tools/render_tables.py           # rewrite the tables between their markers
    python tools/render_tables.py --check   # exit 1, naming each table that differs from the notebooks

Each row is read from one committed notebook: its title (the first "# " heading), its wall time (from
the first cell's start to the last cell's end, as recorded by Jupyter), the headline figures the
notebook computed (`nmt_lib.run.course.headline`, stored in its metadata by `tools/run_course.py`),
and the day and CPU it ran on. No figure in these tables is typed by hand.
"""
import argparse
import json
import re
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLES = {"README.md": ("chapter-table", "results-table"), "book/teachers.md": ("chapter-times",)}
RESULTS = ("08_evaluation", "held-out results")       # the notebook and the name of the README's results table


def when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def chapter(path: Path) -> dict:
    """What a row shows of one executed notebook."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    title = next((line[2:].strip() for c in nb["cells"] if c["cell_type"] == "markdown"
                  for line in "".join(c["source"]).splitlines() if line.startswith("# ")), path.stem)
    stamps = [c.get("metadata", {}).get("execution", {}) for c in nb["cells"] if c["cell_type"] == "code"]
    busy = [s["iopub.status.busy"] for s in stamps if "iopub.status.busy" in s]
    idle = [s["iopub.status.idle"] for s in stamps if "iopub.status.idle" in s]
    wall = (when(max(idle)) - when(min(busy))).total_seconds() if busy and idle else None
    meta = nb.get("metadata", {}).get("nmt_course", {})
    return {"path": path, "title": title, "wall": wall, "headlines": meta.get("headlines", []),
            "executed": meta.get("executed"), "cpu": meta.get("cpu"), "mode": meta.get("mode")}


def figure(value) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"


def duration(seconds) -> str:
    if seconds is None:
        return "not executed"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def ran_on(ch: dict) -> str:
    return f"{ch['executed']}, {ch['cpu']}" if ch["executed"] else "not recorded"


def markdown(text: str) -> str:
    """A token such as <unk> in code style, so that Markdown does not take it for an HTML tag."""
    return re.sub(r"(?<!`)<(\w+)>(?!`)", r"`<\1>`", text)


def readme_table(chapters: list[dict]) -> str:
    rows = ["| chapter | time (learner mode) | headline figures | executed on |", "|---|---:|---|---|"]
    for ch in chapters:
        figures = markdown("; ".join(f"{h['name']}: {figure(h['value'])}" for h in ch["headlines"] if "value" in h))
        rows.append(f"| [{ch['title']}](notebooks/{ch['path'].name}) | {duration(ch['wall'])} | {figures} | "
                    f"{ran_on(ch)} |")
    return "\n".join(rows)


def guide_table(chapters: list[dict]) -> str:
    rows = ["| chapter | time (learner mode) | executed on |", "|---|---:|---|"]
    rows += [f"| {ch['title']} | {duration(ch['wall'])} | {ran_on(ch)} |" for ch in chapters]
    return "\n".join(rows)


def results_table(chapters: list[dict]) -> str:
    """The table the results notebook recorded (`nmt_lib.run.course.record_table`), with where it ran."""
    stem, name = RESULTS
    ch = next(c for c in chapters if c["path"].stem == stem)
    table = next((h for h in ch["headlines"] if h.get("name") == name and "rows" in h), None)
    if table is None:
        raise SystemExit(f"render_tables: notebooks/{stem}.ipynb recorded no table {name!r}; run it with run_course")
    lines = ["| model | " + " | ".join(table["columns"]) + " |", "|---|" + "---:|" * len(table["columns"])]
    lines += [f"| {label} | " + " | ".join(map(figure, values)) + " |" for label, *values in table["rows"]]
    return "\n".join(lines) + f"\n\n*Chapter 8, learner mode, executed {ran_on(ch)}.*"


def rendered(text: str, marker: str, table: str, name: str) -> str:
    """`text` with the block between `<!-- marker:start -->` and `<!-- marker:end -->` replaced by `table`."""
    pattern = re.compile(rf"(<!-- {marker}:start -->\n)(?:.*?\n)?(<!-- {marker}:end -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"render_tables: {name} has no <!-- {marker}:start --> ... <!-- {marker}:end --> block")
    return pattern.sub(lambda m: m.group(1) + table + "\n" + m.group(2), text)


def render(root: Path = ROOT) -> dict[str, tuple[str, str]]:
    """For each file with a table: (its text now, its text with the tables rendered from the notebooks)."""
    chapters = [chapter(p) for p in sorted((root / "notebooks").glob("*.ipynb"))]
    tables = {"chapter-table": readme_table(chapters), "chapter-times": guide_table(chapters),
              "results-table": results_table(chapters)}
    out = {}
    for name, markers in TABLES.items():
        text = new = (root / name).read_text(encoding="utf-8")
        for marker in markers:
            new = rendered(new, marker, tables[marker], name)
        out[name] = (text, new)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is out of date")
    args = parser.parse_args(argv)
    stale = []
    for name, (now, new) in render().items():
        if now != new:
            stale.append(name)
            if not args.check:
                (ROOT / name).write_text(new, encoding="utf-8")
    if args.check and stale:
        print(f"render_tables: out of date with the notebooks: {', '.join(stale)}; run python tools/render_tables.py")
        return 1
    print(("rewrote " + ", ".join(stale)) if stale and not args.check else "tables match the notebooks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
