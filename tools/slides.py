#!/usr/bin/env python3
"""Build the module's slides: one reveal.js deck per session of the ten-week plan
(book/module_plan.json, `ten_weeks`), each the lecture written for it in book/lectures/,
working offline (reveal.js, its speaker notes and MathJax are copied beside the decks).

    # or: make slides; then open build/slides/index.html (S opens the speaker notes)
    python tools/slides.py build/slides

A deck opens with the session's week, the assignments due and released that day and the
reading, all from the plan, and the question the lecture answers; it ends with the
homework and the assignments still open, from the plan too. The lecture in between is
the file book/lectures/LECTURE.md that the session's `lecture` names: a `# title`, then
blocks, each under a `## Kind: argument` heading, each a slide in the order written:

    ## Question               the question the session answers (on the opening slide)
    ## Step: HEADING          a step of the build-up to the key equation ($$...$$)
    ## Figure: NAME           figures/NAME.png, as the executed chapter saved it
    ## Code: 05 NAME          chapter 5's function or class NAME (or Class.method): the
                              lesson's own lines, without its docstring or #| lines
    ## Live: 05 HEADING       run live the section of chapter 5 whose heading starts so;
                              its speaker notes give the time its cells took, executed
    ## Output: 05 TEXT        what chapter 5's code cell whose source holds TEXT printed
    ## Room                   a question to ask the room
    ## Notes                  speaker notes for the slide before

A Figure, Code, Live or Output block's first line is its slide's heading, the rest its
caption. {{05: NAME}} reads chapter 5's headline NAME (or the one whose name holds it).
A number with a decimal point or a percent sign typed outside `code` and $math$ is
measured: the build stops unless an output of the lecture's chapters (its plan's, its
blocks') holds it. Read it, or remove it; write a definition as math ($p = 0.1$).
"""

import argparse
import ast
import functools
import html
import json
import re
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

from nbconvert.filters.markdown_mistune import markdown2html_mistune as markdown

import module_plan as mp
import render_tables as rt

ROOT = Path(__file__).resolve().parent.parent
PLAN = ROOT / "book" / "module_plan.json"
LECTURES = ROOT / "book" / "lectures"
FIGURES = ROOT / "figures"
CODE_LINES = 16  # the most lines a code or output slide shows
READ = re.compile(r"\{\{(\w+): ([^{}]+)\}\}")  # {{05: a headline's name}}
NUMBER = re.compile(r"(?<![\w.])(\d[\d,]*(\.\d+)?)(%?)")  # 1,027.9 or 46%
STYLE = """
.reveal { font-size: 28px; }
.reveal .slides section { text-align: left; }
.reveal h1, .reveal h2, .reveal h3 { text-transform: none; }
.reveal h1 { font-size: 1.7em; } .reveal h2 { font-size: 1.3em; }
.reveal p, .reveal li { line-height: 1.35; }
.reveal ul, .reveal ol { display: block; margin-left: 1.2em; }
.reveal img.figure { display: block; margin: 0.2em auto; max-width: 100%;
  max-height: 540px; }
.reveal pre { width: 100%; font-size: 0.7em; box-shadow: none; }
.reveal pre code { max-height: 600px; }
.reveal blockquote { width: 90%; font-style: normal; }
.reveal .meta, .reveal .caption { color: #555; font-size: 0.75em; }
.reveal pre.output, .reveal table.dataframe { font-size: 0.6em; margin: 0.3em 0; }
.reveal pre.output code { white-space: pre-wrap; }
"""


def fail(message: str):
    raise SystemExit(f"slides: {message}")


def inline(text: str) -> str:
    """Markdown for one line (a heading), without the paragraph around it."""
    return re.sub(r"^<p>(.*)</p>\s*$", r"\1", markdown(text), flags=re.S)


@functools.cache
def chapter(number: str) -> tuple[dict, list[dict]]:
    """An executed chapter: what render_tables reads of it (title, when and where it
    ran), and its cells."""
    path = next((ROOT / "notebooks").glob(f"{number}_*.ipynb"), None)
    if path is None:
        fail(f"no chapter {number} in notebooks/")
    return rt.chapter(path), json.loads(path.read_text(encoding="utf-8"))["cells"]


def code(number: str, name: str) -> str:
    """The lines of chapter `number` that define `name`, a function or class or
    Class.method, without its docstring and the cell's `#|` directives."""
    outer, _, inner = name.partition(".")
    for cell in chapter(number)[1]:
        lines = [
            line
            for line in "".join(cell["source"]).splitlines()
            if not line.startswith(("#|", "%", "!"))
        ]
        try:
            tree = ast.parse("\n".join(lines)) if cell["cell_type"] == "code" else None
        except SyntaxError:
            continue
        found = [n for n in getattr(tree, "body", []) if getattr(n, "name", 0) == outer]
        if found and inner:
            found = [n for n in found[0].body if getattr(n, "name", 0) == inner]
        if not found:
            continue
        node, first = found[0], found[0].body[0]
        skip = (
            range(first.lineno, first.end_lineno + 1) if ast.get_docstring(node) else ()
        )
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        shown = [
            lines[i - 1] for i in range(start, node.end_lineno + 1) if i not in skip
        ]
        if len(shown) > CODE_LINES:
            fail(
                f"chapter {number}'s {name} has {len(shown)} lines, more than a slide's"
                f" {CODE_LINES}: show a method of it"
            )
        return textwrap.dedent("\n".join(shown))
    fail(f"chapter {number} defines no {name}")


def printed(o: dict) -> str:
    """A cell output's text: a stream's, or a result's text/plain."""
    return "".join(o.get("text") or o.get("data", {}).get("text/plain", ""))


def output(number: str, source: str) -> str:
    """What the one code cell of chapter `number` whose source holds `source` printed,
    as HTML: a pandas table as its table, the rest as text."""
    cells = [c for c in chapter(number)[1] if source in "".join(c["source"])]
    if len(cells) != 1:
        fail(f"{len(cells)} cells of chapter {number} hold {source!r}, not one")
    shown = []
    for o in cells[0].get("outputs", []):
        data, pre = o.get("data", {}), '<pre class="output"><code>'
        if "<table" in (table := "".join(data.get("text/html", ""))):
            shown.append(re.sub(r'(?s)<style.*?</style>| border="1"', "", table))
        elif not {"image/png", "text/html"} & set(data):
            shown.append(f"{pre}{html.escape(printed(o).strip())}</code></pre>")
    shown = "\n".join(shown).replace(f"</code></pre>\n{pre}", "\n")
    return shown or fail(f"chapter {number}'s cell {source!r} printed nothing")


def headline(number: str, name: str) -> str:
    """The value chapter `number` reported as headline `name`, or as the one headline
    whose name holds `name`, written as render_tables writes it."""
    heads, name = chapter(number)[0]["headlines"], " ".join(name.split())
    shown = {h["name"]: h["value"] for h in heads if "value" in h}
    found = [n for n in shown if n == name] or [n for n in shown if name in n]
    if len(found) != 1:
        fail(f"chapter {number} has {len(found)} headlines named {name!r}, not one")
    return rt.figure(shown[found[0]])


def check_numbers(lecture: str, numbers: set, found: list) -> None:
    """Stop at a measured number (with a decimal point or a percent sign) typed in a
    lecture outside `code` and $math$ that no output of chapters `numbers` holds."""
    cells = [c for n in numbers for c in chapter(n)[1]]
    outputs = "\n".join(printed(o) for c in cells for o in c.get("outputs", []))
    seen = {m[1].replace(",", "") for m in NUMBER.finditer(outputs)}
    skip = r"`[^`\n]*`|\$\$.*?\$\$|\$[^$]*\$|" + READ.pattern
    text = re.sub(skip, "", "\n".join(body for *_, body in found), flags=re.S)
    for m in NUMBER.finditer(text):
        if (m[2] or m[3]) and m[1].replace(",", "") not in seen:
            fail(f"{lecture}.md types {m[0]}, a measured number no output holds")


def section_seconds(number: str, heading: str) -> float:
    """How long the code cells of a chapter's section (from the `## ` heading that
    starts with `heading` to the next) ran when the chapter was executed."""
    cells = chapter(number)[1]
    heads = [
        (i, line[3:])
        for i, c in enumerate(cells)
        if c["cell_type"] == "markdown"
        for line in "".join(c["source"]).splitlines()
        if line.startswith("## ")
    ]
    at = next((k for k, (_, h) in enumerate(heads) if h.startswith(heading)), None)
    if at is None:
        fail(f"chapter {number} has no section headed {heading!r}")
    end = heads[at + 1][0] if at + 1 < len(heads) else len(cells)
    return sum(map(mp.cell_seconds, cells[heads[at][0] : end]))


def blocks(name: str) -> tuple[str, list[tuple[str, str, str]]]:
    """A lecture's title and its blocks: (kind, argument, Markdown text)."""
    path = LECTURES / f"{name}.md"
    if not path.is_file():
        fail(f"the plan names the lecture {name}, but {path} is missing")
    text = path.read_text(encoding="utf-8")
    title = re.search(r"^# (.+)$", text, re.M)
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    heads = [head.partition(":") for head in parts[1::2]]
    found = [
        (k.strip().lower(), a.strip(), b.strip())
        for (k, _, a), b in zip(heads, parts[2::2])
    ]
    return (title.group(1) if title else name), found


def block_slide(kind: str, argument: str, body: str) -> tuple[str, str]:
    """One block's slide, as HTML, and its speaker notes."""
    heading, _, caption = body.partition("\n")
    caption = f'<div class="caption">{markdown(caption)}</div>' if caption else ""
    if kind == "step":
        return f"<h2>{inline(argument)}</h2>\n{markdown(body)}", ""
    if kind == "room":
        return f"<h2>Ask the room</h2>\n{markdown(body)}", ""
    if kind == "figure":
        if not (FIGURES / f"{argument}.png").is_file():
            fail(f"no figure figures/{argument}.png")
        src = f"_static/figures/{argument}.png"
        image = f'<img class="figure" alt="{argument}" src="{src}">'
        return f"<h2>{inline(heading)}</h2>\n{image}\n{caption}", ""
    number, _, name = argument.partition(" ")
    where = f"chapter {mp.label(number)}"
    if kind == "code":
        shown = html.escape(code(number, name))
        return (
            f"<h2>{inline(heading)}</h2>\n<pre><code>{shown}</code></pre>\n"
            f'<p class="meta">{where}, <code>{html.escape(name)}</code></p>\n{caption}'
        ), ""
    if kind == "output":
        meta = f'<p class="meta">{where}, executed {chapter(number)[0]["executed"]}</p>'
        shown = f"<h2>{inline(heading)}</h2>\n{output(number, name)}\n{meta}"
        return f"{shown}\n{caption}", ""
    if kind == "live":
        ch, took = chapter(number)[0], rt.duration(section_seconds(number, name))
        notes = (
            f'Run {where}, section "{name}", live: its cells took {took} when the'
            f" chapter was executed ({ch['mode']} mode, {ch['executed']}, {ch['cpu']})."
        )
        meta = f'<p class="meta">{where}, section "{html.escape(name)}": {took}</p>'
        return f"<h2>Live: {inline(heading)}</h2>\n{meta}\n{caption}", notes
    fail(f"unknown block '## {kind.title()}'")


def plan() -> list[tuple[str, int, dict]]:
    """(the label, the number of the last numbered session, the plan's row) for each
    session of the ten-week plan; an optional one is labelled so, not numbered."""
    out, number = [], 0
    for row in json.loads(PLAN.read_text(encoding="utf-8"))["ten_weeks"]["sessions"]:
        number += not row.get("optional")
        label = "Optional session" if row.get("optional") else f"Session {number}"
        out.append((label, number, row))
    return out


def session_deck(label: str, number: int, row: dict, sessions: list, about: dict):
    """A session's deck: the plan's facts around its lecture."""
    title, found = blocks(row["lecture"])
    shown = {a.split(" ")[0] for k, a, _ in found if k in ("code", "live", "output")}
    check_numbers(row["lecture"], {*row["chapters"], *shown}, found)
    found = [(k, a, READ.sub(lambda m: headline(m[1], m[2]), b)) for k, a, b in found]
    name = lambda a: f"{a}, {html.escape(about[a]['title'])}"
    said = lambda side, what: (
        f'<p class="{side}">{what}: {"; ".join(map(name, row[side]))}</p>'
        if row.get(side)
        else ""
    )
    chapters = [
        html.escape(chapter(n)[0]["title"])
        + "".join(
            f" ({w} &ldquo;{html.escape(s)}&rdquo;)"
            for w, s in (("from", a), ("until", b))
            if s
        )
        for n, a, b in mp.session_parts(row)
    ]
    question = "".join(markdown(b) for k, _, b in found if k == "question")
    opening = (
        f'<p class="when">{label}, week {row["week"]}</p>\n'
        + f"<h1>{html.escape(title)}</h1>\n"
        + (f'<p class="meta">Reading: {"; ".join(chapters)}</p>\n' if chapters else "")
        + f"<blockquote>{question}</blockquote>\n"
        + said("due", "Due today")
        + said("released", "Released today")
    )
    slides = [[opening, ""]]
    for kind, argument, body in found:
        if kind == "notes":
            slides[-1][1] += "\n\n" + body
        elif kind != "question":
            slides.append(list(block_slide(kind, argument, body)))
    due = {a: (n, r["week"]) for _, n, r in sessions for a in r.get("due", [])}
    released = {a: n for _, n, r in sessions for a in r.get("released", [])}
    still = [
        f"{name(a)}: due in session {due[a][0]} (week {due[a][1]})"
        for a in about
        if released[a] <= number < due[a][0]
    ]
    slides.append(
        [
            "<h2>Before the next session</h2>\n"
            + markdown(f"**Homework:** {mp.homework(row)}.")
            + (f"<p><b>Open:</b> {'<br>'.join(still)}</p>" if still else ""),
            "",
        ]
    )
    sections = "\n".join(
        f"<section>\n{body}\n"
        + (f'<aside class="notes">{markdown(notes.strip())}</aside>\n' if notes else "")
        + "</section>"
        for body, notes in slides
    )
    return title, deck(f"{label}: {title}", sections)


def deck(title: str, sections: str) -> str:
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
{sections}
</div></div>
<script src="_static/reveal/dist/reveal.js"></script>
<script src="_static/reveal/plugin/math/math.js"></script>
<script src="_static/reveal/plugin/notes/notes.js"></script>
<script>
Reveal.initialize({{hash: true, width: 1280, height: 800, margin: 0.04, center: false,
  slideNumber: "c/t",
  mathjax3: {{mathjax: "_static/mathjax/tex-chtml.js",
              tex: {{inlineMath: [["$", "$"], ["\\\\(", "\\\\)"]]}}}},
  plugins: [RevealMath.MathJax3, RevealNotes]}});
</script>
</body>
</html>
"""


def decks() -> dict[str, str]:
    """Each deck's file name and HTML, the index's included."""
    data = json.loads(PLAN.read_text(encoding="utf-8"))["ten_weeks"]
    sessions, out, items = plan(), {}, []
    for label, number, row in sessions:
        title, out[f"{row['lecture']}.html"] = session_deck(
            label, number, row, sessions, data["assignments"]
        )
        items.append(
            f'<li>Week {row["week"]}: <a href="{row["lecture"]}.html">{label}.'
            f" {html.escape(title)}</a></li>"
        )
    out["index.html"] = (
        '<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8">'
        "<title>Slides</title></head>\n<body>\n<h1>The ten-week module: one lecture"
        " per session</h1>\n<ul>\n" + "\n".join(items) + "\n</ul>\n</body>\n</html>\n"
    )
    return out


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
    built = decks()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.out.parent, prefix=".slides-") as tmp:
        tmp = Path(tmp) / "slides"
        static = tmp / "_static"
        shutil.copytree(args.reveal / "dist", static / "reveal" / "dist")
        for plugin in ("math", "notes"):
            shutil.copytree(
                args.reveal / "plugin" / plugin, static / "reveal" / "plugin" / plugin
            )
        shutil.copytree(args.mathjax, static / "mathjax")
        (static / "figures").mkdir()
        for name in set(
            re.findall(r"_static/figures/([\w.-]+)", "".join(built.values()))
        ):
            shutil.copy(FIGURES / name, static / "figures" / name)
        for name, text in built.items():
            (tmp / name).write_text(text, encoding="utf-8")
        shutil.rmtree(args.out, ignore_errors=True)
        tmp.rename(args.out)
    print(
        f"slides: {len(built) - 1} decks in {args.out}/ (open index.html; it works"
        " offline)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
