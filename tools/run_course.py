#!/usr/bin/env python3
"""Execute every chapter in order, then the solutions notebooks, headless, and print a table of wall times and headline numbers.

    python tools/run_course.py              # copies run in build/course/, figures to figures/
    python tools/run_course.py --inplace    # re-execute notebooks/ itself (to commit outputs)
    python tools/run_course.py --only 01    # notebooks whose folder/name contains "01" (--only solutions/)

Notebooks report their key numbers with `nmt_lib.run.course.headline(name, value)`.
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

import nbformat
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from render_tables import figure              # the README's format, so both show a figure alike
from nmt_lib.run.records import cpu_name

ROOT = Path(__file__).resolve().parent.parent


def run_one(src: Path, dst: Path, workdir: Path, headlines: Path, timeout: int):
    nb = nbformat.read(src, as_version=4)
    headlines.unlink(missing_ok=True)
    os.environ["NMT_HEADLINES"] = str(headlines)
    # IPC transport: a local kernel needs no TCP port (and ipykernel then prints no warning).
    km = KernelManager(kernel_name="python3", transport="ipc", ip=str(workdir / f".kernel-{src.stem}"))
    client = NotebookClient(nb, km=km, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(workdir)}})
    start, error = time.perf_counter(), None
    try:
        client.execute()
    except CellExecutionError as e:
        error = str(e).strip().splitlines()[-1] if str(e).strip() else "cell failed"
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    wall = time.perf_counter() - start
    numbers = []
    if headlines.exists():
        numbers = [json.loads(line) for line in headlines.read_text(encoding="utf-8").splitlines() if line]
    # What the README's chapter table and the teacher's guide render (tools/render_tables.py): the
    # figures the notebook computed, and where and when it ran.
    nb.metadata["nmt_course"] = {"headlines": numbers, "executed": time.strftime("%Y-%m-%d"), "cpu": cpu_name(),
                                 "mode": "quick" if os.environ.get("NMT_QUICK", "") not in ("", "0") else "learner"}
    nbformat.write(nb, dst)
    return wall, error, numbers


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inplace", action="store_true", help="write outputs back into notebooks/")
    parser.add_argument("--only", default="", help="run only chapters whose file name contains this")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds allowed per cell")
    args = parser.parse_args(argv)

    build = ROOT / "build" / "course"
    build.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("NMT_FIG_DIR", str(ROOT / "figures"))
    # Nobody watches a headless kernel: progress bars would only leave stale widgets in the outputs.
    os.environ["TQDM_DISABLE"] = "1"
    chapters = [p for folder in ("notebooks", "solutions") for p in sorted((ROOT / folder).glob("*.ipynb"))
                if args.only in f"{folder}/{p.name}"]
    if not chapters:
        sys.exit(f"run_course: no notebook in notebooks/ matches {args.only!r}")
    mode = "quick" if os.environ.get("NMT_QUICK", "") not in ("", "0") else "learner"
    print(f"Running {len(chapters)} chapters in {mode} mode; figures go to {os.environ['NMT_FIG_DIR']}", flush=True)

    rows, failed = [], []
    for i, nb_path in enumerate(chapters, 1):
        print(f"[{i}/{len(chapters)}] {nb_path.parent.name}/{nb_path.name} ...", end=" ", flush=True)
        dst = nb_path if args.inplace else build / nb_path.parent.name.replace("notebooks", "") / nb_path.name
        dst.parent.mkdir(parents=True, exist_ok=True)
        workdir = nb_path.parent if args.inplace else dst.parent
        name = nb_path.stem if nb_path.parent.name == "notebooks" else f"{nb_path.parent.name}/{nb_path.stem}"
        wall, error, numbers = run_one(nb_path, dst, workdir, build / f"{name.replace('/', '_')}.headlines.jsonl",
                                       args.timeout)
        print(f"{wall:.1f} s" + (f"  FAILED: {error}" if error else ""), flush=True)
        if error:
            failed.append(nb_path.name)
        rows.append((name, wall, "failed" if error else "ok", numbers))

    print("\n| chapter | wall time | status | headline numbers |\n|---|---:|---|---|")
    for name, wall, status, numbers in rows:
        text = "; ".join(f"{n['name']}: {figure(n['value'])}" for n in numbers if "value" in n)
        print(f"| {name} | {wall:.1f} s | {status} | {text} |")
    print(f"| total | {sum(r[1] for r in rows):.1f} s | | |")
    if not args.inplace:
        print(f"\nExecuted copies are in {build.relative_to(ROOT)}/; the committed notebooks were not touched.")
    if failed:
        print(f"\nFailed: {', '.join(failed)} (open the copy in {build.relative_to(ROOT)}/ to see the error)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
