#!/usr/bin/env python3
"""Write the student edition of the course: a copy of the repository without the
solutions, the hidden tests, the grading tool, the developers' test suite and the
teacher's guide, which a teacher can publish.

    # or: make student [STUDENT_DIR=...]
    python tools/student_edition.py build/student

What changes besides the files left out: the chapters' exercise sections no longer point
to `solutions/`, the book's index drops its Solutions and For-teachers sections, and the
README opens with a line saying which edition this is. The copy runs as the course does
(`make course`, `make lab`, `make nbval`, `make book`). The folder must not exist yet,
or be empty: nothing is overwritten. Only files git tracks are copied, so build outputs,
caches, runs, and students' submissions or scores kept in the checkout stay out.
"""

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEFT_OUT = ("solutions/", "grading/", "tests/", ".ci/", "tools/grade.py")
LEFT_OUT += ("tools/release.py", "tools/student_edition.py", "book/teachers.md")
LEFT_OUT += ("runs/",)
# the paragraph
SOLUTIONS_LINE = re.compile(
    r"^Solutions, executed, are in `solutions/[^`]+`[^\n]*(?:\n[^\n]+)*\n*", re.M
)
# a link to what the edition leaves out keeps its text only
LEFT_OUT_LINK = re.compile(
    r"\[([^\]]+)\]\((?:\.\./|book/)?(?:solutions/[^)]*|teachers\.md[^)]*)\)"
)
BANNER = (
    "> **Student edition.** The exercises' solutions, the assignments' model answers"
    " and hidden tests, and the teacher's guide are left out; your teacher has them."
    " Here `make course`, `make lab`, `make nbval` and `make book` work; `make test`,"
    " `make grade` and `make student` belong to the teacher's copy.\n\n"
)


def kept_files(root: Path) -> list[str]:
    git = ["git", "ls-files", "--cached", "-z"]
    run = subprocess.run(git, cwd=root, capture_output=True, text=True, check=True)
    listed = run.stdout.split("\0")
    return sorted(
        f for f in listed if f and not f.startswith(LEFT_OUT) and (root / f).is_file()
    )


def strip_notebook(path: Path):
    """Drop the pointer to the solutions from a notebook's markdown cells."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    changed = False
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "markdown":
            continue
        text = "".join(cell["source"])  # a list of lines, or one string
        new = LEFT_OUT_LINK.sub(r"\1", SOLUTIONS_LINE.sub("", text))
        if new != text:
            cell["source"], changed = new.splitlines(keepends=True), True
    if changed:
        path.write_text(
            json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )


def strip_index(path: Path):
    """The book's index without its Solutions and For-teachers tables of contents."""
    text = path.read_text(encoding="utf-8")
    for caption in ("Solutions", "For teachers"):
        toc = r"```\{toctree\}\n(?::[^\n]*\n)*?:caption: " + caption + r"\n.*?```\n\n?"
        text = re.sub(toc, "", text, flags=re.S)
    text = re.sub(
        r"their solutions, executed,\s+follow the chapters, and a teacher's guide"
        r" closes the book\.",
        "your teacher has their solutions.",
        text,
    )
    path.write_text(
        text.replace("After the chapters and their solutions,", "After the chapters,"),
        encoding="utf-8",
    )


def write(dest: Path, root: Path = ROOT) -> list[str]:
    """Write the edition into `dest` (which must not exist, or be empty); the files
    written, relative."""
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise SystemExit(
            f"student_edition: {dest} exists and is not an empty folder; choose"
            " another, or remove it"
        )
    files = kept_files(root)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{dest.name}-") as tmp:
        work = Path(tmp) / "edition"
        for name in files:
            target = work / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, target)
        for nb in sorted((work / "notebooks").glob("*.ipynb")):
            strip_notebook(nb)
        strip_index(work / "book" / "index.md")
        for page in [work / "README.md", *sorted((work / "book").glob("*.md"))]:
            page.write_text(
                LEFT_OUT_LINK.sub(r"\1", page.read_text(encoding="utf-8")),
                encoding="utf-8",
            )
        readme = work / "README.md"
        readme.write_text(BANNER + readme.read_text(encoding="utf-8"), encoding="utf-8")
        if dest.exists():
            dest.rmdir()
        work.rename(dest)  # all or nothing: a half-written edition never shows
    return files


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "dest", type=Path, help="a folder that does not exist yet (or is empty)"
    )
    args = parser.parse_args(argv)
    files = write(args.dest.resolve())
    print(
        f"student edition: {len(files)} files in {args.dest} (left out:"
        f" {', '.join(LEFT_OUT)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
