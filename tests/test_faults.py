"""Fault injection: `python -m nmt_lib train` killed or interrupted at random moments
never loses work.

SIGKILL at random moments, and half-way through writing a checkpoint: afterwards the
checkpoint, if there is one, always loads, and --resume finishes the run. SIGINT at
random moments: resuming gives the very weights of a run that never stopped. `make soak`
runs the same with many more faults (NMT_SOAK_FAULTS).
"""

import io
import json
import multiprocessing as mp
import os
import random
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from conftest import same_weights, write_corpus
from nmt_lib.run.checkpoint import load_checkpoint
from nmt_lib.run.records import write_record

FAULTS = int(os.environ.get("NMT_SOAK_FAULTS", "20"))
STEPS = 30
# `make soak` keeps its figures there, for the book
RECORD = os.environ.get("NMT_SOAK_RECORD")


def record(rows: list):
    """Add this test's rows to the soak record's table, when one is asked for."""
    if RECORD:
        path, table = Path(RECORD), {"columns": ["", ""], "rows": [], "align": "lr"}
        new = {"kind": "soak", "command": "make soak", "tables": [table]}
        kept = json.loads(path.read_text()) if path.exists() else new
        kept["tables"][0]["rows"] += rows
        write_record(path, kept)


def train_args(data, out, resume: bool, steps=STEPS, every=1):
    return (
        ["train", "--data", str(data), "--out", str(out)]
        + (
            "--d-model 16 --heads 2 --d-ff 32 --layers 1 --max-tokens 60"
            f" --tokens-per-update 60 --warmup 3 --min-freq 1 --max-steps {steps}"
            f" --epochs 1000 --checkpoint-every {every} --progress none"
        ).split()
        + (["--resume"] if resume else [])
    )


def run_quietly(args, log=os.devnull, paused=None, write=0):
    """The child's work: the command line, its output into `log`; its status is the exit
    code. With `paused` (an event), its `write`-th checkpoint write stops half-way,
    sets `paused` and waits to be killed."""
    sys.stdout = sys.stderr = open(log, "w", buffering=1)
    from nmt_lib.base import cache
    from nmt_lib.run import cli

    save, writes = cache.torch.save, []

    def half_then_wait(obj, f):
        writes.append(f)
        if len(writes) < write:
            return save(obj, f)
        whole = io.BytesIO()
        save(obj, whole)
        Path(f).write_bytes(whole.getvalue()[: len(whole.getvalue()) // 2])
        paused.set()
        time.sleep(600)

    if paused is not None:
        cache.torch.save = half_then_wait
    sys.exit(cli.main(args))


@pytest.fixture(scope="module")
def context():
    """A forkserver that has imported torch (its optimizers pull in torch._dynamo,
    seconds to import) and nmt_lib once: each training process it forks starts in a
    blink."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch._dynamo", "nmt_lib.run.cli"])
    return ctx


def start(context, data, out, args=None, **kw):
    args = args or train_args(data, out, out.exists())
    child = context.Process(target=run_quietly, args=(args,), kwargs=kw)
    child.start()
    return child


def temporary_files(out: Path) -> list:
    return list(out.parent.glob(f".{out.name}.*.tmp"))


def catches(pid, signum) -> bool:
    """Whether process `pid` has a handler of its own for `signum` (Linux's /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(re.search(r"SigCgt:\s*([0-9a-f]+)", status).group(1), 16)
    return bool(caught >> (signum - 1) & 1)


def test_sigint_and_sigterm_before_the_first_checkpoint_still_write_one(
    tmp_path, context
):
    data = write_corpus(tmp_path)
    for signum, status in [(signal.SIGINT, 130), (signal.SIGTERM, 143)]:
        out, log = tmp_path / f"{signum.name}.pt", tmp_path / f"{signum.name}.log"
        # no checkpoint until it stops
        args = train_args(data, out, False, steps=100_000, every=0)
        child = start(context, data, out, args, log=log)
        # however slow the machine: wait until training has set its handlers (SIGHUP's
        # is the last, and Python's own catches none)
        deadline = time.monotonic() + 120
        while child.is_alive() and time.monotonic() < deadline:
            if catches(child.pid, signal.SIGHUP):
                break
            time.sleep(0.05)
        os.kill(child.pid, signum)
        child.join(timeout=60)
        assert child.exitcode == status, log.read_text()
        assert f"--out {out} --resume" in log.read_text()  # how to go on
        ckpt = load_checkpoint(out)
        assert ckpt.payload["progress"]["stopped"] == signum.name
        assert not temporary_files(out)


def test_killed_at_random_moments_the_checkpoint_always_loads_and_resume_finishes(
    tmp_path, context
):
    data, out = write_corpus(tmp_path), tmp_path / "killed.pt"
    # how long one whole run takes here
    timing = start(context, data, tmp_path / "timing.pt")
    began = time.monotonic()
    timing.join(timeout=120)
    whole = time.monotonic() - began
    rng = random.Random(0)
    kills = during_writes = loaded = 0
    while kills < FAULTS:
        had = load_checkpoint(out).step if out.exists() else None
        if kills % 2:  # half-way through writing a checkpoint: the k-th of this run
            paused = context.Event()
            # a run writes a checkpoint at each update
            write = rng.randint(1, min(8, STEPS - (had or 0)))
            child = start(context, data, out, paused=paused, write=write)
            while not paused.wait(0.05):
                assert child.is_alive(), "the run ended before its write"
            during_writes += 1
        else:  # at any moment of a run
            child = start(context, data, out)
            time.sleep(rng.uniform(0.0, 1.2 * whole))
        child.kill()  # SIGKILL: no handler, no cleanup
        child.join()
        kills += 1
        assert out.exists() or had is None  # a checkpoint is never lost
        if out.exists():
            ckpt = load_checkpoint(out)  # raises if the file were damaged
            loaded += 1
            if ckpt.step >= STEPS:  # it got to the end before the kill
                out.unlink()
    child = start(context, data, out)
    child.join(timeout=120)
    assert child.exitcode == 0 and load_checkpoint(out).step == STEPS
    assert not temporary_files(out)
    record(
        [
            ["SIGKILLs", kills],
            ["of them during a checkpoint write", during_writes],
            [
                "kills that found a checkpoint: it loaded and `--resume` finished",
                loaded,
            ],
        ]
    )
    print(
        f"{kills} SIGKILLs ({during_writes} while a checkpoint was being written): the"
        f" checkpoint loaded after each of the {loaded} kills that found one, and"
        " --resume finished the run"
    )


def test_interrupted_at_random_moments_resume_gives_an_unstopped_runs_weights(
    tmp_path, context
):
    data = write_corpus(tmp_path)
    straight = start(context, data, tmp_path / "straight.pt")
    began = time.monotonic()
    straight.join(timeout=120)
    whole = time.monotonic() - began
    assert straight.exitcode == 0
    reference = load_checkpoint(tmp_path / "straight.pt")

    def finished_like_the_straight_run(path):
        done = load_checkpoint(path)
        assert done.step == reference.step == STEPS
        assert same_weights(done.model, reference.model)

    out, rng = tmp_path / "interrupted.pt", random.Random(1)
    interrupts = runs = finished = 0
    while interrupts < max(6, FAULTS // 3):
        child = start(context, data, out)
        time.sleep(rng.uniform(0.0, whole / 2))  # anywhere in a run, its start included
        if child.is_alive():
            os.kill(child.pid, signal.SIGINT)
            interrupts += 1
        child.join(timeout=120)
        runs += 1
        # 1: the SIGINT came before training began
        assert child.exitcode in (0, 130, 1), child.exitcode
        if child.exitcode == 0:  # it got to the end: check, then again
            finished_like_the_straight_run(out)
            finished += 1
            out.unlink()
    child = start(context, data, out)
    child.join(timeout=120)
    assert child.exitcode == 0
    finished_like_the_straight_run(out)
    record(
        [
            ["SIGINTs, over runs", f"{interrupts:,}, over {runs + 1:,}"],
            [
                "runs that got to the end, every one with the uninterrupted run's"
                " weights",
                finished + 1,
            ],
        ]
    )
    print(
        f"{interrupts} SIGINTs over {runs + 1} runs; each of the {finished + 1}"
        " finished runs ended with the weights of a run that never stopped, bit"
        " for bit"
    )
