#!/usr/bin/env python3
"""Grade a student's assignment notebook: run it, then score each task with the public grader and the hidden
tests (grading/hidden.py), and print a score per task with the graders' messages.

    python tools/grade.py A1 path/to/submission.ipynb          # or: make grade ASSIGNMENT=A1 SUBMISSION=...
    python tools/grade.py A1 submission.ipynb --json scores.json
    python tools/grade.py A1 path/to/class/ --csv grades.csv   # every notebook under the folder

A folder is graded a few submissions at a time (`--jobs`, the CPU count by default, the cores shared out as
threads), each stopped after `--limit` seconds; one CSV row per submission, then a summary.

The submission runs cell after cell; a cell that raises does not stop the others (its task then scores what the
names it defined earn). Assignments 1 and 2 run in the grading sandbox (grading/sandbox.py), apart from the
answers, and are graded from this process; assignment 3 runs in its own kernel, where one appended cell grades
it and prints the rows as JSON on one marked line. Exit status 0 once graded, whatever the score; 2 for a usage
error (an unknown assignment, a file that is not a notebook).
"""
import argparse
import csv
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
def run_submission(assignment: str, path: Path, timeout: int) -> tuple[list[dict], list[str]]:
    """The graded rows, and the errors the submission's own cells raised (first line of each). Assignments 1 and
    2 run in the sandbox (grading/sandbox.py), apart from the answers and the graders, which compare here."""
    from grading.hidden import APART, grade_in_sandbox
    if assignment in APART:
        from grading.sandbox import Sandbox
        with Sandbox(assignment, path, timeout=timeout) as box:
            return grade_in_sandbox(assignment, box), box.errors
    return run_in_its_kernel(assignment, path, timeout)


def run_in_its_kernel(assignment: str, path: Path, timeout: int) -> tuple[list[dict], list[str]]:
    """Assignment 3: the submission run in its own kernel, and graded there by a cell appended to it (its model
    is a trained Transformer, read where it was trained). The rows are read from that cell's output only, marked
    with a token drawn for this run; a submission written to cheat could tamper with the graders there."""
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


def grade_apart(assignment: str, path: Path, threads: int, limit: int) -> dict:
    """One submission graded by this script in a process of its own, with `threads` threads and `limit` seconds."""
    env = {**os.environ, "NMT_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    with tempfile.TemporaryDirectory(prefix="nmt-class-") as tmp:
        scores = Path(tmp) / "scores.json"
        proc = subprocess.Popen([sys.executable, __file__, assignment, str(path), "--json", str(scores)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            _, err = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            proc.kill()  # its kernel follows: a kernel ends when the process that started it does
            proc.communicate()
            return {"status": f"not graded: stopped after {limit} s (--limit)", "rows": [], "errors": []}
        if not scores.exists():
            last = ((err or "").strip().splitlines() or ["no output"])[-1]
            return {"status": "not graded: " + last.removeprefix("grade: "),
                    "rows": [], "errors": []}
        return {"status": "graded", **json.loads(scores.read_text())}


def grade_class(assignment: str, folder: Path, out: Path, jobs: int, limit: int) -> str:
    """Grade every notebook under `folder`, `jobs` at a time; write one CSV row per submission to `out` and
    return the summary."""
    from grading.hidden import parts
    notebooks = sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    if not notebooks:
        raise SystemExit(f"grade: no .ipynb under {folder}")
    threads = max(1, (os.cpu_count() or 1) // jobs)
    start = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        results = list(pool.map(lambda p: grade_apart(assignment, p, threads, limit), notebooks))
    seconds = time.perf_counter() - start
    tasks, possible = zip(*parts(assignment))
    out_of = sum(possible)
    points = [sum(row["points"] for row in r["rows"]) for r in results]
    not_run = {"points": 0, "messages": []}  # a task of a submission that was not graded
    with open(out.with_suffix(".tmp"), "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["submission", "status", "points", "out of"]
                        + [c for t in tasks for c in (f"{t}: points", f"{t}: messages")] + ["cells that raised"])
        for path, r, total in zip(notebooks, results, points):
            by_task = {row["task"]: row for row in r["rows"]}
            cells = [c for t in tasks for row in [by_task.get(t, not_run)]
                     for c in (row["points"], " | ".join(row["messages"]))]
            writer.writerow([str(path.relative_to(folder)), r["status"], total, out_of, *cells, "; ".join(r["errors"])])
    out.with_suffix(".tmp").replace(out)
    totals = [total for r, total in zip(results, points) if r["status"] == "graded"]
    lines = [f"{assignment}: {len(notebooks)} submissions in {seconds:.0f} s ({jobs} at a time, {threads} "
             f"thread{'s' * (threads > 1)} each); wrote {out}"]
    if totals:
        lines.append(f"  graded {len(totals)}: points out of {out_of:g}: mean {sum(totals) / len(totals):.1f}, "
                     f"lowest {min(totals):g}, highest {max(totals):g}; full marks {totals.count(out_of)}")
    lines += [f"  {p.relative_to(folder)}: {r['status']}" for p, r in zip(notebooks, results) if r["status"] != "graded"]
    return "\n".join(lines)


def main(argv=None) -> int:
    sys.path.insert(0, str(ROOT))
    from grading.hidden import ASSIGNMENTS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("assignment", help=f"one of {', '.join(ASSIGNMENTS)}")
    parser.add_argument("submission", type=Path, help="the student's .ipynb, or a folder of submissions")
    parser.add_argument("--json", type=Path, help="also write the scores here")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds allowed per cell (default 1800)")
    parser.add_argument("--csv", type=Path, help="a folder's grades (default: grades-A1.csv beside the folder)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="submissions at once (default: CPUs)")
    parser.add_argument("--limit", type=int, default=1800, help="seconds per submission in a folder (default 1800)")
    args = parser.parse_args(argv)
    if args.limit < 1:
        parser.error("--limit must be at least 1 second")
    if args.assignment not in ASSIGNMENTS:
        parser.error(f"unknown assignment {args.assignment!r}: choose one of {', '.join(ASSIGNMENTS)}")
    if args.submission.is_dir():
        if args.jobs < 1:
            parser.error("--jobs must be at least 1")
        out = args.csv or args.submission.resolve().parent / f"grades-{args.assignment}.csv"
        print(grade_class(args.assignment, args.submission, out, args.jobs, args.limit))
        return 0
    if args.submission.suffix != ".ipynb" or not args.submission.is_file():
        parser.error(f"{args.submission} is neither a notebook file (.ipynb) nor a folder of them")
    rows, errors = run_submission(args.assignment, args.submission, args.timeout)
    print(report(args.assignment, args.submission, rows, errors))
    if args.json:
        args.json.write_text(json.dumps({"assignment": args.assignment, "submission": str(args.submission),
                                         "rows": rows, "errors": errors}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
