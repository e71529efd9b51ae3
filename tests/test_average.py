"""Checkpoint averaging (`nmt_lib.run.average`): `train --keep-last N` keeps the last N
epoch ends, and `average` writes the mean of a run's checkpoints, refusing checkpoints
of different runs.
"""

import os

import pytest
import torch

from conftest import same_weights, tiny_model, train_tiny
from nmt_lib.run.average import average_checkpoints, epoch_checkpoint
from nmt_lib.run.checkpoint import CheckpointError, load_checkpoint
from nmt_lib.run.corpus import ParallelCorpus


def train(corpus, out, epochs=4, keep_last=2):
    more = dict(epochs=epochs, checkpoint_every=3, keep_last=keep_last)
    return train_tiny(tiny_model(corpus), corpus, more, checkpoint=out)


@pytest.fixture
def run(corpus, tmp_path):
    """A run of 4 epochs that keeps its last 2 epoch ends: its checkpoint and
    progress."""
    return tmp_path / "run.pt", train(corpus, tmp_path / "run.pt")


def test_keep_last_keeps_exactly_the_last_epoch_ends(run, tmp_path):
    out, progress = run
    kept = sorted(p.name for p in tmp_path.glob("run.epoch*.pt"))
    assert kept == ["run.epoch3.pt", "run.epoch4.pt"]  # epochs 1 and 2 were let go
    ends = dict(zip(progress["history"]["epoch"], progress["history"]["epoch_step"]))
    ckpt = {epoch: load_checkpoint(epoch_checkpoint(out, epoch)) for epoch in (3, 4)}
    assert {epoch: c.step for epoch, c in ckpt.items()} == {3: ends[3], 4: ends[4]}
    assert same_weights(ckpt[4].model, load_checkpoint(out).model)


def test_average_is_the_mean_of_the_weights_and_cannot_be_resumed(run, tmp_path):
    paths = [epoch_checkpoint(run[0], 3), epoch_checkpoint(run[0], 4)]
    mean = average_checkpoints(paths, tmp_path / "avg.pt")
    first, second = (load_checkpoint(p, device="cpu") for p in paths)
    a, b = first.model.state_dict(), second.model.state_dict()
    avg = load_checkpoint(mean, device="cpu")
    for name, t in avg.model.state_dict().items():
        torch.testing.assert_close(t, (a[name] + b[name]) / 2)
    # two different checkpoints were averaged
    assert any(not torch.equal(a[name], b[name]) for name in a)
    assert avg.payload["optimizer"] is None
    assert (
        avg.payload["averaged"] == [first.step, second.step] and avg.step == second.step
    )


def test_checkpoints_of_different_runs_or_named_twice_are_refused(
    run, de_corpus, tmp_path
):
    out = run[0]
    other = ParallelCorpus(de_corpus, min_freq=1, seed=5)  # another split: another run
    train(other, tmp_path / "other.pt", epochs=1, keep_last=0)
    with pytest.raises(CheckpointError, match="not of the same run"):
        average_checkpoints([out, tmp_path / "other.pt"], tmp_path / "avg.pt")
    with pytest.raises(ValueError, match="named twice"):
        average_checkpoints([out, out], tmp_path / "avg.pt")
    os.link(out, tmp_path / "link.pt")
    with pytest.raises(ValueError, match="named twice.*link"):
        average_checkpoints([out, tmp_path / "link.pt"], tmp_path / "avg.pt")
    # the last epoch end, saved again at the end
    with pytest.raises(ValueError, match="holds the same update"):
        average_checkpoints([epoch_checkpoint(out, 4), out], tmp_path / "avg.pt")
    copy = tmp_path / "copy.pt"
    copy.write_bytes(out.read_bytes())
    with pytest.raises(ValueError, match="holds the same update"):
        average_checkpoints([out, copy], tmp_path / "avg.pt")
    with pytest.raises(ValueError, match="is one of the checkpoints"):
        average_checkpoints([out, epoch_checkpoint(out, 3)], out)
    with pytest.raises(ValueError, match="could no longer resume"):
        ends = [epoch_checkpoint(out, 3), epoch_checkpoint(out, 4)]
        average_checkpoints(ends, tmp_path / "other.pt")
    assert not (tmp_path / "avg.pt").exists()
