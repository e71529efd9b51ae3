#!/usr/bin/env python3
"""Grade assignments: a class with nbgrader (collect, autograde, feedback, export), its
points for each coded task and the concept questions from the grading sandbox; or one
notebook, its points printed (book/teachers.md).

    # or: make grade ASSIGNMENT=A1 SUBMISSIONS=path/to/class/
    python tools/grade.py A1 path/to/class/
    # what COURSE/submitted/ holds (after nbgrader zip_collect)
    python tools/grade.py A1 --course COURSE
    # one notebook: make grade ASSIGNMENT=A1 SUBMISSION=...
    python tools/grade.py A1 submission.ipynb

A class folder holds a folder per student id, with the notebook (and A3's hand-in/).
They are copied into an nbgrader course folder (course/ beside it, or --course) and
autograded; each submission is graded in the sandbox (grading/sandbox.py), `--jobs` at a
time, and its points and the graders' sentences go into the gradebook; then feedback
and a CSV row per student (grading/export.py). Exit status 0 once graded, whatever the
score; 2 for a usage error.
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import release  # noqa: E402  (tools/, beside this script)

ROOT = Path(__file__).resolve().parent.parent


def run_submission(
    assignment: str, path: Path, timeout: int
) -> tuple[list[dict], list[str]]:
    """The graded rows, and the first line of each error the submission's cells raised;
    the graders compare here, and A3's read the runs in hand-in/."""
    import pandas  # noqa: F401  (the graders' modules, imported before any submission runs)
    from grading.hidden import grade_in_sandbox
    from grading.sandbox import Sandbox
    from nmt_lib import decoding, metrics, recipes  # noqa: F401
    from nmt_lib.checks.a3 import RUNS
    from nmt_lib.run import checkpoint, published  # noqa: F401

    with Sandbox(
        assignment, path, timeout=timeout, carry=(RUNS,) if assignment == "A3" else ()
    ) as box:
        return grade_in_sandbox(assignment, box), box.errors


def report(assignment: str, path: Path, rows: list[dict], errors: list[str]) -> str:
    total, out_of = sum(r["points"] for r in rows), sum(r["out_of"] for r in rows)
    lines = [f"{assignment}, {path.name}: {total:g} / {out_of:g} points"]
    for r in rows:
        lines.append(f"  {r['task']}: {r['points']:g} / {r['out_of']:g}")
        lines += [f"    {m}" for m in r["messages"]]
    if errors:
        lines.append("  cells that raised: " + "; ".join(errors))
    return "\n".join(lines)


def grade_apart(
    assignment: str, path: Path, threads: int, limit: int, timeout: int
) -> dict:
    """One submission graded by this script in a process of its own, with `threads`
    threads, `limit` seconds in all and `timeout` seconds a cell."""
    env = {**os.environ, "NMT_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    with tempfile.TemporaryDirectory(prefix="nmt-class-") as tmp:
        scores = Path(tmp) / "scores.json"
        command = [sys.executable, "-B", __file__, assignment, str(path), "--json"]
        proc = subprocess.Popen(
            [*command, str(scores), "--timeout", str(timeout)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _, err = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            # its kernel follows: a kernel ends when the process that started it does
            proc.kill()
            proc.communicate()
            why = f"stopped after {limit} s (--limit)"
            return {"status": f"not graded: {why}", "rows": [], "errors": []}
        if not scores.exists():
            last = ((err or "").strip().splitlines() or ["no output"])[-1]
            why = last.removeprefix("grade: ")
            return {"status": f"not graded: {why}", "rows": [], "errors": []}
        return {"status": "graded", **json.loads(scores.read_text())}


# ---- a class: nbgrader's course folder, autograde, the sandbox's points, export ----
SOURCES = ROOT / "solutions" / "assignments"
# autograde's kernels in the jail (grading/jail.py)
CONFIG = """from nbgrader.converters import Autograde

c = get_config()
c.CourseDirectory.root = {root!r}
c.CourseDirectory.db_url = "sqlite:///{root}/gradebook.db"
c.Execute.timeout = {timeout}
c.Autograde.autograde_preprocessors = [
    "grading.jail.JailedExecute" if p.__name__ == "Execute" else p
    for p in Autograde.autograde_preprocessors.default()
]
"""


def nbgrader(course: Path, *args: str, check: bool = True, timeout=None, env=None):
    """One nbgrader command in the course folder `course` (`env` added to this
    process's); its failure stops the grading, with its message, unless `check` is
    False."""
    env = os.environ | (env or {})
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), env.get("PYTHONPATH")])
    )
    # nbgrader's alembic
    env["PATH"] = os.pathsep.join(
        [str(Path(sys.executable).parent), env.get("PATH", "")]
    )
    command = [sys.executable, "-m", "nbgrader", *args]
    run = subprocess.run(
        command, cwd=course, env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and run.returncode != 0:
        raise SystemExit(f"grade: nbgrader {args[0]} failed:\n{run.stderr[-3000:]}")
    return run


def set_up(assignment: str, course: Path, timeout: int) -> str:
    """`course` made an nbgrader course folder with the assignment's source (the model
    answer) in its gradebook; returns the notebook's name."""
    source = next(SOURCES.glob(f"{assignment}_*.ipynb"))
    (course / "source" / assignment).mkdir(parents=True, exist_ok=True)
    (course / "source" / assignment / source.name).write_bytes(source.read_bytes())
    (course / "nbgrader_config.py").write_text(
        CONFIG.format(root=str(course.resolve()), timeout=timeout) + release.CONFIG
    )
    nbgrader(course, "generate_assignment", assignment, "--force")
    return source.name


def link_or_copy(src: str, dst: str):
    """A hard link to `src` at `dst`, or a copy across file systems."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def collect(assignment: str, name: str, submissions: Path, course: Path) -> list[str]:
    """Copy each student's folder in `submissions` (one notebook, and A3's runs) to
    submitted/STUDENT/ASSIGNMENT/, as nbgrader's `collect` does, and add the student to
    the gradebook; returns the students. A folder without one notebook is left out."""
    from nbgrader.api import Gradebook
    from nmt_lib.checks.a3 import RUNS

    students = []
    for folder in sorted(p for p in submissions.iterdir() if p.is_dir()):
        # links are left out: a link to a teacher's file would be copied as that file
        found = [
            p
            for p in folder.rglob("*.ipynb")
            if ".ipynb_checkpoints" not in p.parts
            and p.resolve().is_relative_to(folder.resolve())
            and not p.is_symlink()
        ]
        if len(found) != 1:
            print(f"grade: {folder.name}: {len(found)} notebooks, not one: left out")
            continue
        dest = course / "submitted" / folder.name / assignment
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        shutil.copyfile(found[0], dest / name)
        # hard links where it can: the runs' weights are large
        runs = found[0].parent / RUNS
        if runs.is_dir() and not runs.is_symlink():
            links = lambda d, names: [n for n in names if Path(d, n).is_symlink()]
            shutil.copytree(
                found[0].parent / RUNS, dest / RUNS, ignore=links,
                copy_function=link_or_copy,
            )  # fmt: skip
        students.append(folder.name)
    with Gradebook(f"sqlite:///{course.resolve()}/gradebook.db") as gb:
        for student in students:
            gb.update_or_create_student(student)
    return students


def answer_cells(source: Path) -> dict:
    """{grade cell: the answer cell at or before it}: where a grade's comment goes."""
    answer, last = {}, None
    for cell in json.loads(source.read_text(encoding="utf-8"))["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        last = meta["grade_id"] if meta.get("solution") else last
        answer[meta.get("grade_id")] = last
    return answer


def record(assignment: str, name: str, course: Path, results: dict):
    """The sandbox's points for each task as its grade cell's automatic score (a manual
    grade overrides it), the graders' sentences as the answer cell's comment; 0 when a
    submission could not be graded. `results`: {student: what `grade_apart` gave}."""
    from nbgrader.api import Gradebook, MissingEntry
    from grading.hidden import grade_cells

    answer = answer_cells(course / "source" / assignment / name)
    cells = grade_cells(assignment)
    with Gradebook(f"sqlite:///{course.resolve()}/gradebook.db") as gb:
        for student, result in results.items():
            for cell, row in zip(cells, result["rows"] or [None] * len(cells)):
                grade = gb.find_grade(cell, Path(name).stem, assignment, student)
                grade.auto_score = row["points"] if row else 0.0
                grade.needs_manual_grade = False
                try:
                    comment = gb.find_comment(
                        answer[cell], Path(name).stem, assignment, student
                    )
                    comment.auto_comment = (
                        " ".join(row["messages"]) if row else result["status"]
                    )
                except (MissingEntry, KeyError):
                    pass
        gb.db.commit()


def autograde(
    assignment: str, course: Path, students: list, limit: int, lib: Path
) -> dict:
    """nbgrader's autograde of each student's notebook, its kernel in the jail with the
    stubbed course in `lib`, stopped after `limit` seconds, its log in the course
    folder. Returns {student: why nbgrader could not grade their notebook}."""
    log, failed = course / f"autograde-{assignment}.log", {}
    log.write_text("")
    for student in students:
        try:
            run = nbgrader(
                course, "autograde", assignment, f"--student={student}", "--force",
                check=False, timeout=limit, env={"NMT_JAIL_LIB": str(lib)},
            )  # fmt: skip
        except subprocess.TimeoutExpired:  # its kernel follows it
            failed[student] = f"not graded: autograde ran past {limit} s (--limit)"
            continue
        with log.open("a", encoding="utf-8") as f:
            f.write(run.stderr)
        if run.returncode != 0:
            errors = re.findall(
                r"^\s*(\w[\w.]*(?:Error|Exception)\b.*)$", run.stderr, re.M
            )
            why = errors[-1] if errors else f"see {log.name}"
            failed[student] = f"not graded: nbgrader's autograde failed ({why})"
    return failed


# the longest cell nbgrader is given: a written answer is a few hundred words, and
# nbconvert takes quadratic time on some long markdown
CELL_CHARS = 20_000


def refused(path: Path) -> str | None:
    """Why a submitted notebook is not given to nbgrader at all, or None."""
    from grading.export import NOT_A_NOTEBOOK, cells

    try:
        sources = [source for _, source in cells(path)]
    except NOT_A_NOTEBOOK:
        return "not graded: not a notebook (nbformat's JSON, with cells of text)"
    if max(map(len, sources), default=0) > CELL_CHARS:
        return f"not graded: a cell is over {CELL_CHARS:,} characters"
    return None


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def grade_course(
    assignment: str,
    course: Path,
    submissions: Path | None,
    out: Path,
    jobs: int,
    limit: int,
    timeout: int,
) -> str:
    """A class graded: collect (from `submissions`, else submitted/), autograde, the
    sandbox's points (`jobs` at a time, each stopped after `limit` s), feedback, and
    one CSV row per student, with the cells for the teacher to read."""
    from grading.export import to_read
    from grading.sandbox import course_copy
    from nmt_lib.base.cache import atomic_save

    start = time.perf_counter()
    name = set_up(assignment, course, timeout)
    if submissions is not None:
        collect(assignment, name, submissions, course)
    paths = {
        p.parent.parent.name: p
        for p in sorted(course.glob(f"submitted/*/{assignment}/{name}"))
    }
    if not paths:
        raise SystemExit(
            f"grade: no submission of {assignment} in {course / 'submitted'}"
        )
    hashes = {student: digest(path) for student, path in paths.items()}
    status = {s: why for s, path in paths.items() if (why := refused(path))}
    with tempfile.TemporaryDirectory(prefix="nmt-lib-") as tmp:
        lib = course_copy(assignment, Path(tmp))
        students = [s for s in paths if s not in status]
        status |= autograde(assignment, course, students, limit, lib)
    graded = [s for s in paths if s not in status]
    threads = max(1, (os.cpu_count() or 1) // jobs)

    def grade_one(student):
        if digest(paths[student]) != hashes[student]:
            why = "not graded: the notebook changed after it was collected"
            return {"status": why, "rows": [], "errors": []}
        return grade_apart(assignment, paths[student], threads, limit, timeout)

    with ThreadPoolExecutor(jobs) as pool:
        results = dict(zip(graded, pool.map(grade_one, graded)))
    # graded again, alone: a neighbour may have taken what it needed (the disk, memory)
    for student, result in results.items():
        if (
            result["status"].startswith("not graded")
            and "--limit" not in result["status"]
        ):
            results[student] = grade_one(student)
    record(assignment, name, course, results)
    status |= {s: r["status"] for s, r in results.items()}
    if os.environ.get("NMT_NO_ISOLATION"):
        status = {s: f"{why} (not isolated)" for s, why in status.items()}

    def read(student):  # its cells to read, and what the graders named (A3's runs)
        rows = results.get(student, {}).get("rows", [])
        named = [m for r in rows for m in r["messages"][:1] if "; to read: " in m]
        named = [m.split("; to read: ")[1] for m in named]
        return "; ".join(filter(None, [to_read(paths[student]), *named]))

    side = {s: {"status": why, "to read": read(s)} for s, why in status.items()}
    write = lambda obj, file: Path(file).write_text(json.dumps(obj, indent=1))
    atomic_save(side, course / f"grading-{assignment}.json", write)
    nbgrader(course, "generate_feedback", assignment, "--force")
    nbgrader(
        course,
        "export",
        "--exporter=grading.export.TaskCsv",
        f"--to={out.resolve()}",
        f"--assignment=['{assignment}']",
    )
    lines = [
        f"{assignment}: {len(paths)} submissions graded in"
        f" {time.perf_counter() - start:.0f} s ({jobs} at a time in the sandbox); wrote"
        f" {out}; feedback in {course / 'feedback'}"
    ]
    lines += [f"  {s}: {why}" for s, why in status.items() if why != "graded"]
    return "\n".join(lines)


def main(argv=None) -> int:
    sys.path.insert(0, str(ROOT))
    from grading.hidden import ASSIGNMENTS
    from grading.jail import unavailable

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("assignment", help=f"one of {', '.join(ASSIGNMENTS)}")
    parser.add_argument(
        "submission",
        type=Path,
        nargs="?",
        help="a student's .ipynb, or a folder with one folder per student (none:"
        " --course's)",
    )
    parser.add_argument(
        "--course",
        type=Path,
        help="the nbgrader course folder a class is graded in (default: course/ beside"
        " the folder of submissions)",
    )
    parser.add_argument("--json", type=Path, help="one notebook's scores, also here")
    parser.add_argument(
        "--timeout", type=int, default=1800, help="seconds a cell (1800)"
    )
    parser.add_argument(
        "--csv", type=Path, help="a class's grades (default: COURSE/grades-A1.csv)"
    )
    cpus = os.cpu_count() or 1
    parser.add_argument("--jobs", type=int, default=cpus, help="submissions at once")
    parser.add_argument("--limit", type=int, default=1800, help="seconds each (1800)")
    parser.add_argument(
        "--no-isolation",
        action="store_true",
        help="grade without bubblewrap's namespaces, where none can be made: the"
        " submissions can then read the answers (the CSV says so)",
    )
    args = parser.parse_args(argv)
    if args.limit < 1 or args.jobs < 1:
        parser.error("--limit and --jobs must be at least 1")
    if args.no_isolation:
        os.environ["NMT_NO_ISOLATION"] = "1"
    elif not os.environ.get("NMT_NO_ISOLATION") and (why := unavailable()):
        parser.exit(2, f"grade: {why}; or pass --no-isolation (see book/teachers.md)\n")
    if args.assignment not in ASSIGNMENTS:
        parser.error(
            f"unknown assignment {args.assignment!r}: choose one of"
            f" {', '.join(ASSIGNMENTS)}"
        )
    if args.submission is None or args.submission.is_dir():
        if args.submission is None and args.course is None:
            parser.error(
                "give a folder of submissions, or --course with its submitted/ folder"
            )
        course = args.course or args.submission.resolve().parent / "course"
        out = args.csv or course / f"grades-{args.assignment}.csv"
        how = args.jobs, args.limit, args.timeout
        print(grade_course(args.assignment, course, args.submission, out, *how))
        return 0
    if args.submission.suffix != ".ipynb" or not args.submission.is_file():
        parser.error(
            f"{args.submission} is neither a notebook file (.ipynb) nor a folder of"
            " submissions"
        )
    rows, errors = run_submission(args.assignment, args.submission, args.timeout)
    print(report(args.assignment, args.submission, rows, errors))
    if os.environ.get("NMT_NO_ISOLATION"):
        print("  not isolated (--no-isolation): the submission could read the answers")
    if args.json:
        graded = {"assignment": args.assignment, "submission": str(args.submission)}
        graded |= {"rows": rows, "errors": errors}
        args.json.write_text(json.dumps(graded, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
