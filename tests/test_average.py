"""Checkpoint averaging (`nmt_lib.run.average`): `train --keep-last N` keeps the last N
epoch ends, and `average` writes the mean of a run's checkpoints, refusing checkpoints
of different runs.
"""

import os

import pytest
import torch

from conftest import TINY_RUN, tiny_model
from nmt_lib.run.average import average_checkpoints, epoch_checkpoint
from nmt_lib.run.checkpoint import CheckpointError, load_checkpoint
from nmt_lib.run.corpus import ParallelCorpus
from nmt_lib.run.trainer import RunSettings, train_run


def train(corpus, out, epochs=4, keep_last=2):
    more = dict(epochs=epochs, checkpoint_every=3, keep_last=keep_last)
    settings = RunSettings(**TINY_RUN | more)
    return train_run(
        tiny_model(corpus),
        corpus,
        settings,
        checkpoint=out,
        report="none",
        save_kwargs={"data": corpus.settings},
    )


@pytest.fixture
def run(de_corpus, tmp_path):
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    progress = train(corpus, tmp_path / "run.pt")
    return corpus, tmp_path / "run.pt", progress


def test_keep_last_keeps_exactly_the_last_epoch_ends(run, tmp_path):
    corpus, out, progress = run
    kept = sorted(p.name for p in tmp_path.glob("run.epoch*.pt"))
    assert kept == ["run.epoch3.pt", "run.epoch4.pt"]  # epochs 1 and 2 were let go
    ends = dict(zip(progress["history"]["epoch"], progress["history"]["epoch_step"]))
    for epoch in (3, 4):  # each holds its own epoch's end
        assert (
            load_checkpoint(epoch_checkpoint(out, epoch), device="cpu").step
            == ends[epoch]
        )
    last, final = (
        load_checkpoint(epoch_checkpoint(out, 4), device="cpu"),
        load_checkpoint(out, device="cpu"),
    )
    for a, b in zip(
        last.model.state_dict().values(), final.model.state_dict().values()
    ):
        assert torch.equal(a, b)


def test_average_is_the_mean_of_the_weights_and_cannot_be_resumed(run, tmp_path):
    corpus, out, _ = run
    paths = [epoch_checkpoint(out, 3), epoch_checkpoint(out, 4)]
    mean = average_checkpoints(paths, tmp_path / "avg.pt")
    a, b = (load_checkpoint(p, device="cpu").model.state_dict() for p in paths)
    avg = load_checkpoint(mean, device="cpu")
    for name, t in avg.model.state_dict().items():
        torch.testing.assert_close(t, (a[name] + b[name]) / 2)
    # two different checkpoints were averaged
    assert any(not torch.equal(a[name], b[name]) for name in a)
    assert avg.payload["optimizer"] is None and avg.payload["averaged"] == sorted(
        load_checkpoint(p, device="cpu").step for p in paths
    )
    assert avg.step == max(load_checkpoint(p, device="cpu").step for p in paths)


def test_checkpoints_of_different_runs_or_named_twice_are_refused(
    run, de_corpus, tmp_path
):
    corpus, out, _ = run
    other = ParallelCorpus(de_corpus, min_freq=1, seed=5)  # another split: another run
    train(other, tmp_path / "other.pt", epochs=1, keep_last=0)
    with pytest.raises(CheckpointError, match="not of the same run.*data"):
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
    with pytest.raises(
        ValueError, match="a run's checkpoint, which it could no longer resume from"
    ):
        average_checkpoints(
            [epoch_checkpoint(out, 3), epoch_checkpoint(out, 4)], tmp_path / "other.pt"
        )
    assert not (tmp_path / "avg.pt").exists()
