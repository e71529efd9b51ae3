#!/usr/bin/env python3
"""Build the module's slides: one reveal.js deck per session of the module plan
(book/module_plan.json), from the executed chapters, working offline (reveal.js and
MathJax are copied beside the decks: no CDN).

    # or: make slides; then open build/slides/index.html
    python tools/slides.py build/slides

A deck opens with the session's outcomes, what to run in class and the reading. Then,
for each chapter of the session: its title and learning goals; every figure, under the
heading of its section; the cells a teacher marked as slides (in JupyterLab's property
inspector, *Slide Type* "Slide"; a code cell shows its code and printed output, its
figures on slides of their own, a markdown cell its text, or its display equations alone
when the text is longer than a slide holds); the summary; and one slide per concept
question, for a quiz at the start of the next session. It ends with the homework. A
figure cell marked "Skip" is left out. The figures are the committed notebooks' outputs:
re-execute a chapter (`make notebooks`) to refresh them.
"""

import argparse
import html
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

from nbconvert.filters.markdown_mistune import markdown2html_mistune as markdown

ROOT = Path(__file__).resolve().parent.parent
# characters: a marked markdown cell longer than this shows its display equations alone
EQUATION_SLIDE = 400
PLAN = ROOT / "book" / "module_plan.json"
STYLE = """
.reveal { font-size: 26px; }
.reveal .slides section { text-align: left; }
.reveal h1, .reveal h2, .reveal h3 { text-transform: none; }
.reveal h1 { font-size: 1.8em; } .reveal h2 { font-size: 1.35em; }
.reveal h3 { font-size: 1.05em; }
.reveal p, .reveal li { line-height: 1.3; }
.reveal ul, .reveal ol { display: block; margin-left: 1.2em; }
.reveal img.figure { display: block; margin: 0.3em auto; max-width: 100%;
  max-height: 610px; }
.reveal pre { width: 100%; font-size: 0.55em; box-shadow: none; }
.reveal pre code { max-height: 560px; }
.reveal table { font-size: 0.6em; }
.reveal .meta { color: #555; font-size: 0.8em; }
"""


def inline(text: str) -> str:
    """Markdown for one line (a heading), without the paragraph around it."""
    return re.sub(r"^<p>(.*)</p>\s*$", r"\1", markdown(text), flags=re.S)


def slide_type(cell) -> str:
    return cell.get("metadata", {}).get("slideshow", {}).get("slide_type", "")


def outputs(cell_outputs: list[dict]) -> str:
    """A code cell's figures, HTML tables and printed text, as HTML."""
    parts = []
    for out in cell_outputs:
        data = out.get("data", {})
        if "image/png" in data:
            parts.append(
                '<img class="figure" alt="figure"'
                f' src="data:image/png;base64,{data["image/png"].strip()}">'
            )
        elif "text/html" in data:
            parts.append("".join(data["text/html"]))
        elif out.get("output_type") == "stream" or "text/plain" in data:
            text = "".join(out.get("text") or data.get("text/plain", ""))
            parts.append(f"<pre>{html.escape(text)}</pre>")
    return "\n".join(parts)


def section(body: str) -> str:
    return f"<section>\n{body}\n</section>"


def part_after(text: str, heading: str) -> str:
    """The markdown under `heading` up to the next heading of its level or above."""
    start = text.index(heading) + len(heading)
    end = re.search(r"^#{1,2} ", text[start:], re.M)
    return text[start : start + end.start() if end else len(text)].strip()


def pieces(text: str, limit: int = 1500) -> list[str]:
    """Markdown cut between paragraphs or top-level list items into parts of at most
    about `limit` characters, one per slide."""
    parts = [""]
    for block in re.split(r"\n(?=\* |\d+\. |\n)", text):
        if parts[-1] and len(parts[-1]) + len(block) > limit:
            parts.append("")
        parts[-1] += block + "\n"
    return [p.strip() for p in parts]


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def chapter_slides(path: Path) -> list[str]:
    # heading: as HTML, the section a figure belongs to (before the first: the chapter)
    slides, heading = [], ""
    for cell in cells(path):
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            if source.startswith("# "):
                title = source.splitlines()[0][2:]
                heading = html.escape(title)
                goals = re.search(
                    r"\*\*Learning goals\.\*\*.*?(?=\n\n\*\*|\n#|\Z)", source, re.S
                )
                slides.append(
                    section(
                        f"<h1>{heading}</h1>\n"
                        + (markdown(goals.group(0)) if goals else "")
                    )
                )
            elif re.search(r"^## Summary$", source, re.M):
                parts = pieces(part_after(source, "## Summary"))
                slides += [
                    section(
                        f"<h2>Summary{f' ({i}/{len(parts)})' * (len(parts) > 1)}</h2>\n"
                        + markdown(part)
                    )
                    for i, part in enumerate(parts, 1)
                ]
            elif re.search(r"^## Concept questions$", source, re.M):
                questions = re.split(
                    r"^(?=\d+\. )",
                    part_after(source, "## Concept questions"),
                    flags=re.M,
                )[1:]
                for q in questions:
                    slides.append(section("<h2>Concept question</h2>\n" + markdown(q)))
            found = re.findall(r"^## (.+)$", source, re.M)
            heading = inline(found[-1]) if found else heading
            # a key equation: the cell, or its displays alone
            if slide_type(cell) == "slide":
                # the heading is the title
                text = re.sub(r"^#{1,3} .*$", "", source, flags=re.M).strip()
                displays = re.findall(r"\$\$.+?\$\$", text, re.S)
                body = (
                    "\n\n".join(displays)
                    if displays and len(text) > EQUATION_SLIDE
                    else text
                )
                slides.append(section(f"<h2>{heading}</h2>\n" + markdown(body)))
        else:
            shown = cell.get("outputs", [])
            figures = [o for o in shown if "image/png" in o.get("data", {})]
            # the code and its printed output; its figures follow
            if slide_type(cell) == "slide":
                code = f"<pre><code>{html.escape(source)}</code></pre>"
                printed = outputs([o for o in shown if o not in figures])
                slides.append(section(f"<h2>{heading}</h2>\n{code}\n{printed}"))
            if slide_type(cell) != "skip":
                slides += [
                    section(f"<h2>{heading}</h2>\n" + outputs([o])) for o in figures
                ]
    return slides


def deck(title: str, slides: list[str]) -> str:
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<link rel="stylesheet" href="_static/reveal/dist/reveal.css">
<link rel="stylesheet" href="_static/reveal/dist/theme/white.css">
<style>{STYLE}</style>
</head>
<body>
<div class="reveal"><div class="slides">
{chr(10).join(slides)}
</div></div>
<script src="_static/reveal/dist/reveal.js"></script>
<script src="_static/reveal/plugin/math/math.js"></script>
<script>
Reveal.initialize({{hash: true, width: 1280, height: 800, margin: 0.04, center: false,
  slideNumber: "c/t",
  mathjax3: {{mathjax: "_static/mathjax/tex-chtml.js",
              tex: {{inlineMath: [["$", "$"], ["\\\\(", "\\\\)"]]}}}},
  plugins: [RevealMath.MathJax3]}});
</script>
</body>
</html>
"""


def sessions() -> list[tuple[str, str, dict]]:
    """(file name, title, the plan's row) for each session, numbered as the teacher's
    guide numbers them."""
    out, n = [], 0
    for row in json.loads(PLAN.read_text(encoding="utf-8"))["sessions"]:
        if row.get("optional"):
            out.append(
                (f"optional-{'-'.join(row['chapters'])}.html", "Optional session", row)
            )
        else:
            n += 1
            out.append((f"session-{n:02d}.html", f"Session {n}", row))
    return out


def session_deck(title: str, row: dict) -> str:
    chapters = [
        next((ROOT / "notebooks").glob(f"{c}_*.ipynb")) for c in row["chapters"]
    ]
    sources = [["".join(c["source"]) for c in cells(p)] for p in chapters]
    titles = [
        next(s.splitlines()[0][2:] for s in chapter if s.startswith("# "))
        for chapter in sources
    ]
    shown = " &middot; ".join(html.escape(t) for t in titles)
    opening = f"<h1>{title}</h1>\n<h3>{shown}</h3>\n" + markdown(
        f"**Outcomes:** {row['outcomes']}.\n\n**In class:** {row['demo']}.\n\n"
        f"**Reading:** {row['reading']}"
    )
    closing = "<h2>Before the next session</h2>\n" + markdown(
        f"**Homework:** {row['homework']}.\n\n"
        + (f"**Due:** {row['due']}.\n\n" if row.get("due") else "")
        + f"**Planned study:** {row['study_h']:g} h."
    )
    slides = (
        [section(opening)]
        + [s for p in chapters for s in chapter_slides(p)]
        + [section(closing)]
    )
    return deck(f"{title}: {', '.join(titles)}", slides)


def index(rows) -> str:
    items = "\n".join(
        f'<li><a href="{name}">{title}</a>: {html.escape(row["outcomes"])}</li>'
        for name, title, row in rows
    )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head><meta'
        ' charset="utf-8"><title>Slides</title></head>\n<body>\n<h1>Slides, one deck'
        f" per session</h1>\n<ul>\n{items}\n</ul>\n</body>\n</html>\n"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder to write (replaced)")
    parser.add_argument(
        "--reveal", type=Path, default=ROOT / "build" / "reveal.js-5.1.0"
    )
    parser.add_argument(
        "--mathjax", type=Path, default=ROOT / "build" / "mathjax-3.2.2"
    )
    args = parser.parse_args(argv)
    for name, folder, check in (
        ("reveal.js", args.reveal, "dist/reveal.js"),
        ("mathjax", args.mathjax, "tex-chtml.js"),
    ):
        if not (folder / check).is_file():
            sys.exit(
                f"slides: {folder / check} is missing: run `python"
                f" tools/fetch_static.py {name} {folder}` (make slides does)"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = sessions()
    with tempfile.TemporaryDirectory(dir=args.out.parent, prefix=".slides-") as tmp:
        tmp = Path(tmp) / "slides"
        shutil.copytree(args.reveal / "dist", tmp / "_static" / "reveal" / "dist")
        shutil.copytree(
            args.reveal / "plugin" / "math",
            tmp / "_static" / "reveal" / "plugin" / "math",
        )
        shutil.copytree(args.mathjax, tmp / "_static" / "mathjax")
        for name, title, row in rows:
            (tmp / name).write_text(session_deck(title, row), encoding="utf-8")
        (tmp / "index.html").write_text(index(rows), encoding="utf-8")
        shutil.rmtree(args.out, ignore_errors=True)
        tmp.rename(args.out)
    print(f"slides: {len(rows)} decks in {args.out}/ (open index.html; works offline)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
