#!/usr/bin/env python3
"""Execute the chapters in order (or the solutions notebooks), headless, and print a
table of wall times and headline numbers.

    # the chapters: copies run in build/course/, figures to figures/
    python tools/run_course.py
    # the solutions notebooks instead (make solutions)
    python tools/run_course.py --solutions
    # the chapters, then the solutions
    python tools/run_course.py --all
    # re-execute the notebooks themselves (to commit outputs)
    python tools/run_course.py --inplace
    # those whose folder/name contains "01"
    python tools/run_course.py --only 01

Notebooks report their key numbers with `nmt_lib.base.course.headline(name, value)`.
"""

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import nbformat
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from render_tables import figure  # the README's format, so both show a figure alike
from nmt_lib.base.course import quick_mode
from nmt_lib.run.records import cpu_name

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 3600  # seconds a cell may run


def run_one(src: Path, dst: Path, workdir: Path, headlines: Path):
    nb = nbformat.read(src, as_version=4)
    headlines.unlink(missing_ok=True)
    os.environ["NMT_HEADLINES"] = str(headlines)
    # IPC transport: a local kernel needs no TCP port (and ipykernel then prints no
    # warning).
    km = KernelManager(
        kernel_name="python3", transport="ipc", ip=str(workdir / f".kernel-{src.stem}")
    )
    client = NotebookClient(
        nb,
        km=km,
        timeout=TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},
    )
    start, error = time.perf_counter(), None
    try:
        client.execute()
    except CellExecutionError as e:
        error = str(e).strip().splitlines()[-1] if str(e).strip() else "cell failed"
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    wall = time.perf_counter() - start
    text = headlines.read_text(encoding="utf-8") if headlines.exists() else ""
    numbers = [json.loads(line) for line in text.splitlines() if line]
    # What the README's chapter table and the teacher's guide render
    # (tools/render_tables.py): the figures the notebook computed, and where and when it
    # ran.
    nb.metadata["nmt_course"] = {
        "headlines": numbers,
        "executed": time.strftime("%Y-%m-%d"),
        "cpu": cpu_name(),
        "mode": "quick" if quick_mode() else "learner",
    }
    without_progress_bars(nb)
    nbformat.write(nb, dst)
    return wall, error, numbers


WIDGETS = "application/vnd.jupyter.widget-state+json"
VIEW = "application/vnd.jupyter.widget-view+json"
# tqdm's notebook bar: text, progress, text
BAR = ["HTMLModel", "FloatProgressModel", "HTMLModel"]


def without_progress_bars(nb):
    """Drop tqdm's notebook bars from the outputs (nobody watches a headless kernel:
    they would only be stale widgets), and the saved widget state that nothing shown
    uses any more."""
    state = nb.metadata.get("widgets", {}).get(WIDGETS, {}).get("state", {})

    def names(ref_list):
        return [
            state.get(ref.removeprefix("IPY_MODEL_"), {}).get("model_name")
            for ref in ref_list
        ]

    def is_bar(output):
        model = state.get(output.get("data", {}).get(VIEW, {}).get("model_id"), {})
        return (
            model.get("model_name") == "HBoxModel"
            and names(model["state"].get("children", [])) == BAR
        )

    shown = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if not is_bar(o)]
            shown += [
                o["data"][VIEW]["model_id"]
                for o in cell.outputs
                if VIEW in o.get("data", {})
            ]
    kept, todo = set(), shown
    while todo:  # everything the remaining views refer to, however deep
        model_id = todo.pop()
        if model_id in state and model_id not in kept:
            kept.add(model_id)
            todo += [
                ref.removeprefix("IPY_MODEL_")
                for ref in re.findall(r"IPY_MODEL_\w+", json.dumps(state[model_id]))
            ]
    if not kept:
        nb.metadata.pop("widgets", None)
    elif state:
        nb.metadata["widgets"][WIDGETS]["state"] = {
            k: v for k, v in state.items() if k in kept
        }


def chosen(
    only: str = "", *, solutions: bool = False, everything: bool = False
) -> tuple[tuple, list[Path]]:
    """The folders to run (the chapters by default) and their notebooks whose
    folder/name contains `only`."""
    # the exercises' solutions, the assignments' model answers
    answers = ("solutions", "solutions/assignments")
    if everything:
        folders = ("notebooks", *answers)
    else:
        folders = answers if solutions else ("notebooks",)
    return folders, [
        p
        for folder in folders
        for p in sorted((ROOT / folder).glob("*.ipynb"))
        if only in f"{folder}/{p.name}"
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--inplace", action="store_true", help="write outputs back into notebooks/"
    )
    parser.add_argument(
        "--only", default="", help="run only notebooks whose folder/name contains this"
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--solutions",
        action="store_true",
        help="run the solutions notebooks instead of the chapters",
    )
    which.add_argument(
        "--all",
        action="store_true",
        help="run the chapters, then the solutions notebooks",
    )
    args = parser.parse_args(argv)

    build = ROOT / "build" / "course"
    build.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("NMT_FIG_DIR", str(ROOT / "figures"))
    # Nobody watches a headless kernel: the command line's progress bars read this; the
    # lessons' tqdm.auto bars do not (they pass disable= themselves), and their notebook
    # widgets are dropped from the outputs.
    os.environ["TQDM_DISABLE"] = "1"
    folders, chapters = chosen(args.only, solutions=args.solutions, everything=args.all)
    if not chapters:
        sys.exit(
            f"run_course: no notebook in {' or '.join(f + '/' for f in folders)}"
            f" matches {args.only!r}"
        )
    mode = "quick" if quick_mode() else "learner"
    what = "chapters" if folders == ("notebooks",) else "notebooks"
    print(
        f"Running {len(chapters)} {what} in {mode} mode; figures go to"
        f" {os.environ['NMT_FIG_DIR']}",
        flush=True,
    )

    rows, failed = [], []
    for i, nb_path in enumerate(chapters, 1):
        print(
            f"[{i}/{len(chapters)}] {nb_path.parent.name}/{nb_path.name} ...",
            end=" ",
            flush=True,
        )
        dst = (
            nb_path
            if args.inplace
            else build / nb_path.parent.name.replace("notebooks", "") / nb_path.name
        )
        dst.parent.mkdir(parents=True, exist_ok=True)
        workdir = nb_path.parent if args.inplace else dst.parent
        chapter = nb_path.parent.name == "notebooks"
        name = nb_path.stem if chapter else f"{nb_path.parent.name}/{nb_path.stem}"
        headlines = build / f"{name.replace('/', '_')}.headlines.jsonl"
        wall, error, numbers = run_one(nb_path, dst, workdir, headlines)
        print(f"{wall:.1f} s" + (f"  FAILED: {error}" if error else ""), flush=True)
        if error:
            failed.append(nb_path.name)
        kind = "chapter" if chapter else "solutions"
        rows.append((name, kind, wall, "failed" if error else "ok", numbers))

    print(
        "\n| notebook | kind | wall time | status | headline numbers"
        " |\n|---|---|---:|---|---|"
    )
    for name, kind, wall, status, numbers in rows:
        text = "; ".join(
            f"{n['name']}: {figure(n['value'])}" for n in numbers if "value" in n
        )
        print(f"| {name} | {kind} | {wall:.1f} s | {status} | {text} |")
    print(f"| total | | {sum(r[2] for r in rows):.1f} s | | |")
    if not args.inplace:
        print(
            f"\nExecuted copies are in {build.relative_to(ROOT)}/; the committed"
            " notebooks were not touched."
        )
    if failed:
        print(
            f"\nFailed: {', '.join(failed)} (open the copy in"
            f" {build.relative_to(ROOT)}/ to see the error)"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
