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
    from module_plan import assignment_table, plan_table  # which import this

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
