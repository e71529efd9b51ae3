"""Data-parallel training through torchrun (nmt_lib.run.parallel, chapter 10): two
Gloo processes on the CPU take disjoint shares of each update and end with the
weights of one process taking the same updates; their checkpoint resumes with any
number of processes."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, write_corpus
from nmt_lib.run.checkpoint import load_checkpoint
from nmt_lib.training import update_groups

# largest weight difference allowed: float sums taken in another order, over a few
# updates
TOLERANCE = 1e-5
# Attention's key bias adds q.b to every score of a query, which the softmax cancels:
# its gradient is zero in exact arithmetic and rounding noise in practice, and Adam
# scales that noise up to steps of the learning rate's size whose sign depends on the
# order of the sums. Those weights do not change what the model computes.
NOISE_ONLY = ("W_k.bias",)


def accumulate_like_one_process(tokens, per_update):
    """Chapter 9's rule, micro-batch by micro-batch: an update ends once it holds
    per_update tokens."""
    groups, current, held = [], [], 0
    for i, n in enumerate(tokens):
        current.append(i)
        held += n
        if held >= per_update or i + 1 == len(tokens):
            groups.append(current)
            current, held = [], 0
    return groups


@pytest.mark.parametrize("per_update", [1, 50, 120, 10_000])
def test_update_groups_are_the_updates_of_one_process_and_resume_mid_epoch(per_update):
    tokens = [37, 12, 90, 41, 5, 66, 70, 8, 19, 44, 3]
    groups = update_groups(tokens, per_update)
    assert [list(range(a, b)) for a, b in groups] == accumulate_like_one_process(
        tokens, per_update
    )
    # resuming at any update's end (the trainer groups the batches left) gives the
    # rest of the same updates
    for a, _ in groups:
        rest = [(first - a, end - a) for first, end in groups if first >= a]
        assert update_groups(tokens[a:], per_update) == rest
    assert update_groups([], per_update) == []


def train(data, out, steps, *, ranks=1, resume=False):
    """`python -m nmt_lib train`, or the same under torchrun with `ranks` Gloo
    processes; no dropout, fp32."""
    torchrun = f"-m torch.distributed.run --standalone --nproc_per_node {ranks}"
    launcher = [sys.executable, *(torchrun.split() if ranks > 1 else [])]
    args = ["--out", out, *f"--max-steps {steps} --progress none --device cpu".split()]
    if resume:
        args += ["--resume"]
    else:
        args += ["--data", data] + (
            "--d-model 16 --heads 2 --d-ff 32 --layers 1 --dropout 0 --precision fp32"
            " --max-tokens 60 --tokens-per-update 150 --warmup 2 --min-freq 1"
            " --epochs 50 --checkpoint-every 1"
        ).split()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NMT_THREADS": "1"}
    command = [*launcher, "-m", "nmt_lib", "train", *map(str, args)]
    run = subprocess.run(
        command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def largest_difference(a: Path, b: Path) -> float:
    wa, wb = (load_checkpoint(path).model.state_dict() for path in (a, b))
    assert wa.keys() == wb.keys()
    return max(
        float((wa[k].float() - wb[k].float()).abs().max())
        for k in wa
        if not k.endswith(NOISE_ONLY)
    )


def test_two_gloo_processes_train_like_one_and_their_checkpoint_resumes_with_any_number(
    tmp_path,
):
    data = write_corpus(tmp_path)
    one = train(data, tmp_path / "one.pt", 6)
    two = train(data, tmp_path / "two.pt", 6, ranks=2)
    assert "2 processes" in two.stderr  # the run said what it was
    # rank 0 reports, as one process does
    assert len(two.stdout.splitlines()) == len(one.stdout.splitlines())
    h1, h2 = (
        load_checkpoint(tmp_path / f"{n}.pt").payload["progress"]["history"]
        for n in ("one", "two")
    )
    # the same tokens in every update
    assert h1["tokens"] == h2["tokens"] and len(h1["tokens"]) == 6
    assert h2["train_loss"] == pytest.approx(h1["train_loss"], rel=1e-5)
    assert largest_difference(tmp_path / "one.pt", tmp_path / "two.pt") < TOLERANCE

    # stopped after 3 updates by two processes, then resumed by two, or by one
    train(data, tmp_path / "half.pt", 3, ranks=2)
    # updates tell apart
    assert (
        largest_difference(tmp_path / "half.pt", tmp_path / "one.pt") > 100 * TOLERANCE
    )
    (tmp_path / "half-copy.pt").write_bytes((tmp_path / "half.pt").read_bytes())
    train(data, tmp_path / "half.pt", 6, ranks=2, resume=True)
    train(data, tmp_path / "half-copy.pt", 6, resume=True)
    for resumed in ("half.pt", "half-copy.pt"):
        assert load_checkpoint(tmp_path / resumed).step == 6
        assert largest_difference(tmp_path / "one.pt", tmp_path / resumed) < TOLERANCE
