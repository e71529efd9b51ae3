"""The speedrun: its record table (speedrun/run.py), each record beside the one it
builds on with the gain's paired-bootstrap interval (chapter 4a) over the test
sentences; and its trainer (speedrun/train.py), the library's with a moving average of
the weights, BPE-dropout, a warm-down and the record of a run's sittings."""

import importlib.util
import json
import re

import numpy as np
import pytest
import torch

from conftest import ROOT, TINY_RUN, cli_call, tiny_model
from nmt_lib.metrics import bleu_from_counts
from nmt_lib.run.checkpoint import load_checkpoint
from nmt_lib.run.corpus import ParallelCorpus
from nmt_lib.run.trainer import StopRequest, train_run
from nmt_lib.training import noam_lr
from nmt_lib.transformer import Transformer, TransformerConfig
from speedrun.train import Resegmented, SpeedrunHooks, SpeedrunSettings, ema_checkpoint
from test_subword import bpe_corpus


def runner():
    spec = importlib.util.spec_from_file_location(
        "speedrun_run", ROOT / "speedrun" / "run.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_table_gives_each_record_its_gain_over_the_one_it_builds_on_with_interval(
    tmp_path, monkeypatch
):
    run = runner()
    (tmp_path / "records").mkdir()
    monkeypatch.setattr(run, "HERE", tmp_path)
    monkeypatch.setattr(run, "RECORDS", tmp_path)
    rng = np.random.default_rng(0)
    words = "the cat dog sat ran on under a mat rug today at home".split()
    refs = [" ".join(rng.choice(words, 8)) for _ in range(200)]
    # the last three words wrong
    worse = [" ".join(r.split()[:5] + ["x", "y", "z"]) for r in refs]
    better = [r if i % 2 else w for i, (r, w) in enumerate(zip(refs, worse))]
    bleu = {}
    for name, on, hyps, day in (
        ("base", None, worse, "1"),
        ("better", "base", better, "2"),
    ):
        counts = run.sentence_counts(hyps, refs)
        bleu[name] = bleu_from_counts(
            np.sum([[int(n) for n in c.split()] for c in counts], axis=0)
        )
        record = {
            "track": "quick",
            "name": name,
            "change": name,
            "on": on,
            "recorded": day,
            "alpha": 1.0,
            "beam4": {"sacrebleu": bleu[name]},
            "greedy": {"sacrebleu": 0.0},
            "counts_beam4": counts,
            "training_minutes": 30.0,
            "updates": 10,
            "parameters": 1e6,
            "machine": {"cpu": "a CPU"},
            "command": "python speedrun/run.py ...",
            "signature": "sig",
        }
        (tmp_path / "records" / f"quick-{name}.json").write_text(json.dumps(record))
    run.table()
    rows = json.loads((tmp_path / "speedrun.json").read_text())["tables"][0]["rows"]
    assert [r[1] for r in rows] == ["base", "better"] and rows[0][5] == "the baseline"
    gain, interval = rows[1][5].split(" (")
    low, high = (float(x) for x in interval.split(")")[0].split(" to "))
    assert (
        float(gain) == round(bleu["better"] - bleu["base"], 2)
        and 0 < low < float(gain) < high
    )
    assert rows[1][5].endswith("over base")


def test_rendering_the_table_again_writes_a_file_only_when_a_record_changed(
    tmp_path, monkeypatch
):
    run = runner()
    (tmp_path / "records").mkdir()
    monkeypatch.setattr(run, "HERE", tmp_path)
    monkeypatch.setattr(run, "RECORDS", tmp_path)
    record = {
        "track": "quick",
        "name": "base",
        "change": "base",
        "on": None,
        "recorded": "1",
        "alpha": 1.0,
        "beam4": {"sacrebleu": 30.0},
        "greedy": {"sacrebleu": 29.0},
        "counts_beam4": [],
        "training_minutes": 30.0,
        "updates": 10,
        "parameters": 1e6,
        "machine": {"cpu": "a CPU"},
        "command": "python speedrun/run.py ...",
        "signature": "sig",
    }
    (tmp_path / "records" / "quick-base.json").write_text(json.dumps(record))
    run.table()
    written, write = [], run.write_record
    monkeypatch.setattr(
        run,
        "write_record",
        lambda path, table: written.append(path.name) or write(path, table),
    )
    run.table()
    assert written == []  # the same rows: no file rewritten, nor restamped
    (tmp_path / "records" / "quick-base.json").write_text(
        json.dumps({**record, "updates": 11})
    )
    run.table()
    assert written == ["speedrun-best.json", "speedrun.json"]


def test_a_resumed_record_trains_only_for_the_minutes_its_checkpoint_has_left(
    tmp_path, monkeypatch
):
    import subprocess
    from types import SimpleNamespace

    import nmt_lib.run.checkpoint as checkpoint

    run = runner()
    monkeypatch.setattr(run, "ROOT", tmp_path)
    monkeypatch.setattr(run, "RUNS", tmp_path / "runs")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "quick-a.pt").write_bytes(b"")
    progress = {"seconds": 12 * 60.0, "stopped": "SIGTERM", "step": 700}
    monkeypatch.setattr(
        checkpoint, "read_payload", lambda *a, **k: {"progress": progress}
    )
    commands = []
    monkeypatch.setattr(
        subprocess,
        "run",
        lambda command, **k: commands.append(command) or SimpleNamespace(returncode=1),
    )
    with pytest.raises(SystemExit, match="exists; pass --resume"):
        run.run("quick", "a", "a change", None, ["--d-model", "64"])
    # the stub's training "fails" here
    with pytest.raises(SystemExit, match="go on with --resume"):
        run.run("quick", "a", "a change", None, ["--d-model", "64"], resume=True)
    resumed = commands[0][commands[0].index("speedrun/train.py") :]
    assert (
        "--resume" in resumed and resumed[resumed.index("--time-limit") + 1] == "18.00"
    )


def test_an_averaged_record_is_the_mean_of_the_final_and_last_epoch_ends_once_each(
    tmp_path, monkeypatch
):
    import os
    import subprocess

    import nmt_lib.run.checkpoint as checkpoint
    import nmt_lib.run.average as average

    run = runner()
    monkeypatch.setattr(run, "ROOT", tmp_path)
    monkeypatch.setattr(run, "RUNS", tmp_path / "runs")
    (tmp_path / "runs").mkdir()
    for epoch in (2, 3, 4, 5):
        (tmp_path / "runs" / f"quick-a.epoch{epoch}.pt").write_bytes(bytes([epoch]))
    # stopped at an epoch end
    os.link(tmp_path / "runs" / "quick-a.epoch5.pt", tmp_path / "runs" / "quick-a.pt")
    finished = {"progress": {"seconds": 1800.0, "stopped": "time_limit", "step": 900}}
    # nothing left to train
    monkeypatch.setattr(checkpoint, "read_payload", lambda *a, **k: finished)
    monkeypatch.setattr(
        subprocess,
        "run",
        lambda command, **k: pytest.fail("a finished run trained again"),
    )
    averaged = []

    def mean(paths, out):
        averaged.extend(p.name for p in paths)
        raise SystemExit("averaged")

    monkeypatch.setattr(average, "average_checkpoints", mean)
    with pytest.raises(SystemExit, match="averaged"):
        run.run("quick", "a", "a change", None, [], resume=True, average=3)
    assert averaged == ["quick-a.epoch3.pt", "quick-a.epoch4.pt", "quick-a.pt"]
    with pytest.raises(SystemExit, match="needs 4 epoch ends"):
        run.run("quick", "a", "a change", None, [], resume=True, average=5)


def test_a_record_trained_with_ema_scores_its_moving_average_and_refuses_to_average_too(
    tmp_path, monkeypatch
):
    import subprocess

    import nmt_lib.run.checkpoint as checkpoint
    import speedrun.train as average

    run = runner()
    monkeypatch.setattr(run, "ROOT", tmp_path)
    monkeypatch.setattr(run, "RUNS", tmp_path)
    (tmp_path / "quick-a.pt").write_bytes(b"")
    finished = {
        "progress": {"seconds": 1800.0, "stopped": "time_limit", "step": 900},
        "ema": {"n_averaged": 900},
    }
    monkeypatch.setattr(checkpoint, "read_payload", lambda *a, **k: finished)
    monkeypatch.setattr(
        subprocess,
        "run",
        lambda command, **k: pytest.fail("a finished run trained again"),
    )
    made = []
    monkeypatch.setattr(
        average, "ema_checkpoint", lambda path, out: made.append(path.name) or out
    )

    def scored(path, **k):
        raise SystemExit(f"scored {path.name}")

    monkeypatch.setattr(checkpoint, "load_checkpoint", scored)
    with pytest.raises(SystemExit, match="scored quick-a.ema.pt"):
        run.run("quick", "a", "a change", None, [], resume=True)
    assert made == ["quick-a.pt"]
    with pytest.raises(SystemExit, match="--average and --ema"):  # before any training
        run.run("quick", "b", "a change", None, ["--ema", "0.999"], average=3)


def speedrun(model, corpus, settings: dict, **kw) -> dict:
    """`train_run` with the speedrun's hooks, on `TINY_RUN` with `settings` changed."""
    kw = {"report": "none", "save_kwargs": {"data": corpus.settings}, **kw}
    settings = SpeedrunSettings(**TINY_RUN | settings)
    return train_run(model, corpus, settings, hooks_class=SpeedrunHooks, **kw)


def test_ema_is_the_moving_average_of_the_weights_after_each_update_and_resumes_exactly(
    de_corpus, tmp_path
):
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    weights = []  # the model after updates 1, 2 and 3, each from a run stopped there
    for steps in (1, 2, 3):
        model = tiny_model(corpus)
        out = tmp_path / f"{steps}.pt"
        speedrun(model, corpus, dict(max_steps=steps, ema=0.75), checkpoint=out)
        weights.append(model.state_dict())
    expected = {
        k: 0.75 * (0.75 * w1 + 0.25 * weights[1][k]) + 0.25 * weights[2][k]
        for k, w1 in weights[0].items()
    }
    ema = ema_checkpoint(tmp_path / "3.pt", tmp_path / "ema.pt")
    for name, t in load_checkpoint(ema, device="cpu").model.state_dict().items():
        torch.testing.assert_close(t, expected[name])
    resumed = load_checkpoint(tmp_path / "2.pt", device="cpu")
    speedrun(
        resumed.model,
        corpus,
        dict(max_steps=3, ema=0.75),
        resume=resumed.payload,
        checkpoint=tmp_path / "2.pt",
    )
    resumed_ema, straight_ema = (
        torch.load(tmp_path / p, weights_only=True)["ema"] for p in ("2.pt", "3.pt")
    )
    assert resumed_ema.keys() == straight_ema.keys()
    assert all(torch.equal(resumed_ema[k], straight_ema[k]) for k in straight_ema)
    with pytest.raises(ValueError, match="keeps no moving average.*--ema"):
        ema_checkpoint(tmp_path / "ema.pt", tmp_path / "again.pt")


def test_bpe_dropout_draws_new_pieces_per_epoch_spelling_the_same_text_and_resumes(
    tmp_path,
):
    corpus = ParallelCorpus(
        bpe_corpus(tmp_path), tokenizer="bpe", vocab_size=400, shared_vocab=True
    )
    loader = Resegmented(corpus, 0.2, max_len=8).loader(
        "train", batch_size=30, max_tokens=300, seed=1
    )
    usual, drawn = (
        loader.batch_sampler.usual,
        {},
    )  # (source, target) pieces of each pair
    for epoch in (1, 2, 1):
        loader.batch_sampler.set_epoch(epoch)
        assert [
            len(b) for b in loader.batch_sampler
        ] and loader.batch_sampler.lengths == loader.dataset.lengths()
        drawn.setdefault(epoch, []).append((loader.dataset.src, loader.dataset.tgt))
    assert drawn[1][0] == drawn[1][1] and drawn[1][0][0] != drawn[2][0][0] != usual[0]
    spell = lambda pieces: [corpus.src_vocab.sp.decode(ids) for ids in pieces]
    assert spell(drawn[2][0][0]) == spell(usual[0]) and spell(drawn[2][0][1]) == spell(
        usual[1]
    )
    src, tgt = drawn[2][0]
    kept = [(s, t) == u for s, t, u in zip(src, tgt, zip(*usual))]
    # too long: the usual pieces
    assert all(max(len(s), len(t)) < 8 or k for s, t, k in zip(src, tgt, kept))
    assert any(max(len(s), len(t)) >= 8 for s, t in zip(src, tgt))  # and some were

    def model():
        torch.manual_seed(0)
        return Transformer(
            TransformerConfig(
                400, 400, d_model=16, n_heads=2, d_ff=32, n_layers=1, max_len=64
            )
        )

    settings = dict(max_tokens=200, bpe_dropout=0.2)
    straight = model()
    speedrun(straight, corpus, settings | dict(max_steps=28))
    out = tmp_path / "run.pt"
    speedrun(model(), corpus, settings | dict(max_steps=24), checkpoint=out)
    ckpt = load_checkpoint(out)
    # mid-epoch, not the first
    assert (
        ckpt.payload["progress"]["epoch"] > 1 and ckpt.payload["progress"]["batch"] > 0
    )
    speedrun(ckpt.model, corpus, settings | dict(max_steps=28), resume=ckpt.payload)
    for a, b in zip(straight.state_dict().values(), ckpt.model.state_dict().values()):
        assert torch.equal(a, b)
    plain = model()
    speedrun(plain, corpus, dict(max_tokens=200, max_steps=28))
    # the pieces were drawn
    assert not torch.equal(plain.decoder.dense.weight, straight.decoder.dense.weight)


def test_a_run_records_where_each_stretch_of_it_computed(de_corpus, tmp_path):
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    out, steps = tmp_path / "run.pt", lambda n: dict(epochs=5, max_steps=n)
    first = speedrun(tiny_model(corpus), corpus, steps(3), checkpoint=out)
    assert [(s["from_update"], s["to_update"]) for s in first["sessions"]] == [(0, 3)]
    # what assignment 3's rules read: the CPU, its cores and the threads
    assert re.fullmatch(r".+, \d+ cores, \d+ threads", first["sessions"][0]["machine"])
    resume = load_checkpoint(out, device="cpu").payload
    again = speedrun(
        tiny_model(corpus), corpus, steps(5), checkpoint=out, resume=resume
    )
    assert [(s["from_update"], s["to_update"]) for s in again["sessions"]] == [
        (0, 3),
        (3, 5),
    ]
    resume = load_checkpoint(out, device="cpu").payload
    done = tmp_path / "done.pt"
    done = speedrun(
        tiny_model(corpus), corpus, steps(5), checkpoint=done, resume=resume
    )
    # a stretch without updates is not entered
    assert done["sessions"] == again["sessions"]


def test_warmdown_takes_the_rate_linearly_to_zero_at_the_budgets_end_and_resumes(
    de_corpus, tmp_path, monkeypatch
):
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    with pytest.raises(ValueError, match="needs a budget"):
        SpeedrunSettings(**TINY_RUN, warmdown=0.5)
    straight, settings = tiny_model(corpus), dict(max_steps=8, warmdown=0.5)
    lr = speedrun(straight, corpus, settings)["history"]["lr"]
    noam = [noam_lr(s, d_model=16, warmup=3, factor=0.5) for s in range(1, 9)]
    # after k of the 8 updates, the next runs at the schedule's rate times
    # min(1, (8 - k) / 4)
    assert lr == pytest.approx(
        [rate * min(1, (8 - k) / 4) for k, rate in enumerate(noam)]
    )
    # stopped by a signal inside the warm-down
    stop, after_update = StopRequest(), SpeedrunHooks.after_update
    monkeypatch.setattr(
        SpeedrunHooks,
        "after_update",
        lambda self, *a: (a[-1]["step"] == 5 and stop()) or after_update(self, *a),
    )
    path = tmp_path / "run.pt"
    speedrun(tiny_model(corpus), corpus, settings, checkpoint=path, stop=stop)
    monkeypatch.setattr(SpeedrunHooks, "after_update", after_update)
    ckpt = load_checkpoint(path)
    assert ckpt.payload["progress"]["step"] == 5
    resumed = speedrun(ckpt.model, corpus, settings, resume=ckpt.payload)
    assert resumed["history"]["lr"] == lr
    for a, b in zip(straight.parameters(), ckpt.model.parameters()):
        assert torch.equal(a, b)


def test_the_library_s_trainer_refuses_to_resume_a_speedrun_and_says_which_to_use(
    de_corpus, tmp_path, capsys
):
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    out = tmp_path / "run.pt"
    speedrun(tiny_model(corpus), corpus, dict(max_steps=2), checkpoint=out)
    status, _, err = cli_call(capsys, "train", "--out", out, "--resume")
    assert status == 1 and err.count("\n") == 1, err
    assert "was trained with bpe_dropout, ema, warmdown" in err
