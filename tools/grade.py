#!/usr/bin/env python3
"""Grade a student's assignment notebook: run it, then score each task with the public grader and the hidden
tests (grading/hidden.py), and print a score per task with the graders' messages.

    python tools/grade.py A1 path/to/submission.ipynb          # or: make grade ASSIGNMENT=A1 SUBMISSION=...
    python tools/grade.py A1 submission.ipynb --json scores.json

The submission runs in its own kernel, in a temporary folder, cell after cell; a cell that raises does not stop
the others (its task then scores what the names it defined earn). One cell is appended that grades the names
the notebook defined and prints the rows as JSON on one marked line. Exit status 0 once graded, whatever the
score; 2 for a usage error (an unknown assignment, a file that is not a notebook).
"""
import argparse
import json
import os
import secrets
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
def run_submission(assignment: str, path: Path, timeout: int) -> tuple[list[dict], list[str]]:
    """The graded rows, and the errors the submission's own cells raised (first line of each). The rows are read
    from the appended cell's output only, marked with a token drawn for this run. Grading runs in the student's
    kernel, so a submission written to cheat can still tamper with the graders: it is a check of honest work."""
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    nb = nbformat.read(path, as_version=4)
    mark = f"NMT-GRADE-{secrets.token_hex(8)} "
    grading = (f"import sys, json\nsys.path.insert(0, {str(ROOT)!r})\nfrom grading.hidden import grade\n"
               f"print({mark!r} + json.dumps(grade({assignment!r}, globals())))")
    nb.cells.append(nbformat.v4.new_code_cell(grading))
    with tempfile.TemporaryDirectory(prefix="nmt-grade-") as work:
        km = KernelManager(kernel_name="python3", transport="ipc", ip=str(Path(work) / ".kernel"))
        client = NotebookClient(nb, km=km, timeout=timeout, kernel_name="python3", allow_errors=True,
                                interrupt_on_timeout=True, resources={"metadata": {"path": work}})
        try:
            client.execute()
        except DeadKernelError:
            raise SystemExit("grade: the submission's kernel died (out of memory?); nothing was graded") from None
        finally:
            if km.has_kernel:
                km.shutdown_kernel(now=True)
    errors, rows = [], None
    for i, cell in enumerate(nb.cells[:-1]):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                errors.append(f"cell {i + 1}: {out.get('ename')}: {((out.get('evalue') or '').splitlines() or [''])[0]}")
    for out in nb.cells[-1].get("outputs", []):
        for line in (out.get("text", "") if out.get("output_type") == "stream" else "").splitlines():
            if line.startswith(mark):
                rows = json.loads(line[len(mark):])
    if rows is None:
        raise SystemExit(f"grade: the grading cell did not run to the end; the submission's errors: {errors}")
    return rows, errors


def report(assignment: str, path: Path, rows: list[dict], errors: list[str]) -> str:
    total, out_of = sum(r["points"] for r in rows), sum(r["out_of"] for r in rows)
    lines = [f"{assignment}, {path.name}: {total:g} / {out_of:g} points"]
    if os.environ.get("NMT_QUICK", "") not in ("", "0"):
        lines.append("  (graded in quick mode, NMT_QUICK set: assignment 3's BLEU bar is meant for learner mode)")
    for r in rows:
        lines.append(f"  {r['task']}: {r['points']:g} / {r['out_of']:g}")
        lines += [f"    {m}" for m in r["messages"]]
    if errors:
        lines.append("  cells that raised: " + "; ".join(errors))
    return "\n".join(lines)


def main(argv=None) -> int:
    sys.path.insert(0, str(ROOT))
    from grading.hidden import ASSIGNMENTS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("assignment", help=f"one of {', '.join(ASSIGNMENTS)}")
    parser.add_argument("submission", type=Path, help="the student's .ipynb")
    parser.add_argument("--json", type=Path, help="also write the scores here")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds allowed per cell (default 1800)")
    args = parser.parse_args(argv)
    if args.assignment not in ASSIGNMENTS:
        parser.error(f"unknown assignment {args.assignment!r}: choose one of {', '.join(ASSIGNMENTS)}")
    if args.submission.suffix != ".ipynb" or not args.submission.is_file():
        parser.error(f"{args.submission} is not a notebook file (.ipynb)")
    rows, errors = run_submission(args.assignment, args.submission, args.timeout)
    print(report(args.assignment, args.submission, rows, errors))
    if args.json:
        args.json.write_text(json.dumps({"assignment": args.assignment, "submission": str(args.submission),
                                         "rows": rows, "errors": errors}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
