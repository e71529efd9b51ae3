"""Fault injection: `python -m nmt_lib train` killed or interrupted at random moments
never loses work.

SIGKILL at random moments, and while a checkpoint is being written: afterwards the
checkpoint, if there is one, always loads, and --resume finishes the run. SIGINT at
random moments: resuming gives the very weights of a run that never stopped. `make soak`
runs the same with many more faults (NMT_SOAK_FAULTS).
"""

import json
import multiprocessing as mp
import os
import random
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import write_corpus
from nmt_lib.run.checkpoint import load_checkpoint
from nmt_lib.run.records import write_record

FAULTS = int(os.environ.get("NMT_SOAK_FAULTS", "20"))
STEPS = 30
# `make soak` keeps its figures there, for the book
RECORD = os.environ.get("NMT_SOAK_RECORD")


def record(rows: list):
    """Add this test's rows to the soak record's table, when one is asked for."""
    if RECORD:
        path = Path(RECORD)
        kept = (
            json.loads(path.read_text())
            if path.exists()
            else {
                "kind": "soak",
                "command": "make soak",
                "tables": [{"columns": ["", ""], "rows": [], "align": "lr"}],
            }
        )
        kept["tables"][0]["rows"] += rows
        write_record(path, kept)


def train_args(data, out, resume: bool):
    args = ["train", "--data", str(data), "--out", str(out)] + (
        "--d-model 16 --heads 2 --d-ff 32 --layers 1 --max-tokens 60"
        f" --tokens-per-update 60 --warmup 3 --min-freq 1 --max-steps {STEPS}"
        " --epochs 1000 --checkpoint-every 1 --progress none"
    ).split()
    return args + (["--resume"] if resume else [])


def run_quietly(args, log=os.devnull):
    """The child's work: the command line, its output into `log`; its status is the exit
    code."""
    sys.stdout = sys.stderr = open(log, "w", buffering=1)
    from nmt_lib.run import cli

    sys.exit(cli.main(args))


@pytest.fixture(scope="module")
def context():
    """A forkserver that has imported torch (its optimizers pull in torch._dynamo,
    seconds to import) and nmt_lib once: each training process it forks starts in a
    blink."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch._dynamo", "nmt_lib.run.cli"])
    return ctx


def start(context, data, out, args=None, log=os.devnull):
    child = context.Process(
        target=run_quietly, args=(args or train_args(data, out, out.exists()), log)
    )
    child.start()
    return child


def temporary_files(out: Path) -> list:
    return list(out.parent.glob(f".{out.name}.*.tmp"))


def test_sigint_and_sigterm_before_the_first_checkpoint_still_write_one(
    tmp_path, context
):
    data = write_corpus(tmp_path)
    for signum, status in [(signal.SIGINT, 130), (signal.SIGTERM, 143)]:
        out, log = tmp_path / f"{signum.name}.pt", tmp_path / f"{signum.name}.log"
        args = train_args(data, out, False)
        args[args.index("--checkpoint-every") + 1] = "0"  # no checkpoint until it stops
        args[args.index("--max-steps") + 1] = "100000"
        child = start(context, data, out, args, log)
        # however slow the machine: wait for training to begin
        deadline = time.monotonic() + 120
        while (
            not (log.exists() and "Transformer:" in log.read_text())
            and child.is_alive()
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        time.sleep(0.5)  # the signal handlers are set just after that line
        os.kill(child.pid, signum)
        child.join(timeout=60)
        err = log.read_text()
        assert child.exitcode == status, err
        assert (
            f"stopped by {signum.name} at update" in err
            and f"--out {out} --resume" in err
        )
        ckpt = load_checkpoint(out)
        assert ckpt.payload["progress"][
            "stopped"
        ] == signum.name and not temporary_files(out)


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
        child = start(context, data, out)
        if kills % 2:  # while a checkpoint is being written: the k-th one of this run
            seen, wanted, deadline = (
                set(),
                rng.randint(1, 8),
                time.monotonic() + whole + 5,
            )
            while (
                len(seen) < wanted and time.monotonic() < deadline and child.is_alive()
            ):
                seen.update(temporary_files(out))
                time.sleep(0.0002)
            during_writes += bool(temporary_files(out))
        else:  # at any moment of a run
            time.sleep(rng.uniform(0.0, 1.2 * whole))
        child.kill()  # SIGKILL: no handler, no cleanup
        child.join()
        kills += 1
        if out.exists():
            ckpt = load_checkpoint(out)  # raises if the file were damaged
            loaded += 1
            if ckpt.step >= STEPS:  # it got to the end before the kill
                out.unlink()
    child = start(context, data, out)
    child.join(timeout=120)
    assert (
        child.exitcode == 0
        and load_checkpoint(out).step == STEPS
        and not temporary_files(out)
    )
    assert during_writes >= FAULTS // 4 and loaded >= FAULTS // 2, (
        during_writes,
        loaded,
    )
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
        for (name, a), b in zip(
            done.model.state_dict().items(), reference.model.state_dict().values()
        ):
            assert torch.equal(a, b), name

    out, rng, interrupts, runs, finished = (
        tmp_path / "interrupted.pt",
        random.Random(1),
        0,
        0,
        0,
    )
    target = max(6, FAULTS // 3)
    while interrupts < target:
        child = start(context, data, out)
        time.sleep(rng.uniform(0.0, whole / 2))  # anywhere in a run, its start included
        if child.is_alive():
            os.kill(child.pid, signal.SIGINT)
            interrupts += 1
        child.join(timeout=120)
        runs += 1
        assert child.exitcode in (
            0,
            130,
            1,
        ), child.exitcode  # 1: the SIGINT came before training began
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
                (
                    "runs that got to the end, every one with the uninterrupted run's"
                    " weights"
                ),
                finished + 1,
            ],
        ]
    )
    print(
        f"{interrupts} SIGINTs over {runs + 1} runs; each of the {finished + 1}"
        " finished runs ended with the weights of a run that never stopped, bit"
        " for bit"
    )
