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

from conftest import ROOT, TINY_RUN, cli_call, same_weights, tiny_model, train_tiny
from nmt_lib.metrics import bleu_from_counts
from nmt_lib.run.checkpoint import load_checkpoint
from nmt_lib.run.corpus import ParallelCorpus
from nmt_lib.run.trainer import StopRequest
from nmt_lib.training import noam_lr
from nmt_lib.transformer import Transformer, TransformerConfig
from speedrun.train import Resegmented, Speedrun, SpeedrunSettings, ema_checkpoint
from test_subword import bpe_corpus


def runner(monkeypatch, **paths):
    """speedrun/run.py as a module, its folders moved to `paths`."""
    spec = importlib.util.spec_from_file_location(
        "speedrun_run", ROOT / "speedrun" / "run.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, path in paths.items():
        monkeypatch.setattr(module, name, path)
    return module


def write_record(folder, name, on=None, day="1", bleu=30.0, counts=(), **more):
    """A record of the quick track, as speedrun/run.py writes it."""
    record = dict(
        track="quick", name=name, change=name, on=on, recorded=day, alpha=1.0,
        beam4={"sacrebleu": bleu}, greedy={"sacrebleu": 0.0},
        counts_beam4=list(counts), training_minutes=30.0, updates=10,
        parameters=1e6, machine={"cpu": "a CPU"}, command="python speedrun/run.py ...",
        signature="sig",
    )  # fmt: skip
    (folder / "records").mkdir(exist_ok=True)
    (folder / "records" / f"quick-{name}.json").write_text(json.dumps(record | more))


def test_the_table_gives_each_record_its_gain_over_the_one_it_builds_on_with_interval(
    tmp_path, monkeypatch
):
    run = runner(monkeypatch, HERE=tmp_path, RECORDS=tmp_path)
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
        write_record(tmp_path, name, on, day, bleu[name], counts)
    run.table()
    rows = json.loads((tmp_path / "speedrun.json").read_text())["tables"][0]["rows"]
    assert [r[1] for r in rows] == ["base", "better"] and rows[0][5] == "the baseline"
    gain, interval = rows[1][5].split(" (")
    low, high = (float(x) for x in interval.split(")")[0].split(" to "))
    assert float(gain) == round(bleu["better"] - bleu["base"], 2)
    assert 0 < low < float(gain) < high and rows[1][5].endswith("over base")


def test_rendering_the_table_again_writes_a_file_only_when_a_record_changed(
    tmp_path, monkeypatch
):
    run = runner(monkeypatch, HERE=tmp_path, RECORDS=tmp_path)
    write_record(tmp_path, "base")
    run.table()
    written, write = [], run.write_record
    record = lambda path, table: written.append(path.name) or write(path, table)
    monkeypatch.setattr(run, "write_record", record)
    run.table()
    assert written == []  # the same rows: no file rewritten, nor restamped
    write_record(tmp_path, "base", updates=11)
    run.table()
    assert written == ["speedrun-best.json", "speedrun.json"]


@pytest.fixture
def stopped(tmp_path, monkeypatch):
    """speedrun/run.py with its runs in `tmp_path`, each run's checkpoint holding what
    `stopped.payload` is set to, and its training a stub that records its command and
    fails."""
    import subprocess
    from types import SimpleNamespace

    import nmt_lib.run.checkpoint as checkpoint

    run = runner(monkeypatch, ROOT=tmp_path, RUNS=tmp_path)
    run.payload, run.commands = {}, []
    monkeypatch.setattr(checkpoint, "read_payload", lambda *a, **k: run.payload)
    failed = SimpleNamespace(returncode=1)
    train = lambda command, **k: run.commands.append(command) or failed
    monkeypatch.setattr(subprocess, "run", train)
    return run


def test_a_resumed_record_trains_only_for_the_minutes_its_checkpoint_has_left(
    tmp_path, stopped
):
    (tmp_path / "quick-a.pt").write_bytes(b"")
    stopped.payload = {"progress": {"seconds": 12 * 60.0, "stopped": "SIGTERM"}}
    with pytest.raises(SystemExit, match="exists; pass --resume"):
        stopped.run("quick", "a", "a change", None, ["--d-model", "64"])
    # the stub's training "fails" here
    with pytest.raises(SystemExit, match="go on with --resume"):
        stopped.run("quick", "a", "a change", None, ["--d-model", "64"], resume=True)
    (command,) = stopped.commands
    resumed = command[command.index("speedrun/train.py") :]
    assert "--resume" in resumed
    assert resumed[resumed.index("--time-limit") + 1] == "18.00"


def test_an_averaged_record_is_the_mean_of_the_final_and_last_epoch_ends_once_each(
    tmp_path, stopped, monkeypatch
):
    import os

    import nmt_lib.run.average as average

    for epoch in (2, 3, 4, 5):
        (tmp_path / f"quick-a.epoch{epoch}.pt").write_bytes(bytes([epoch]))
    # stopped at an epoch end, with nothing left to train
    os.link(tmp_path / "quick-a.epoch5.pt", tmp_path / "quick-a.pt")
    stopped.payload = {"progress": {"seconds": 1800.0, "stopped": "time_limit"}}
    averaged = []

    def mean(paths, out):
        averaged.extend(p.name for p in paths)
        raise SystemExit("averaged")

    monkeypatch.setattr(average, "average_checkpoints", mean)
    with pytest.raises(SystemExit, match="averaged"):
        stopped.run("quick", "a", "a change", None, [], resume=True, average=3)
    assert averaged == ["quick-a.epoch3.pt", "quick-a.epoch4.pt", "quick-a.pt"]
    with pytest.raises(SystemExit, match="needs 4 epoch ends"):
        stopped.run("quick", "a", "a change", None, [], resume=True, average=5)
    assert stopped.commands == []  # a finished run is not trained again


def test_a_record_trained_with_ema_scores_its_moving_average_and_refuses_to_average_too(
    tmp_path, stopped, monkeypatch
):
    import nmt_lib.run.checkpoint as checkpoint
    import speedrun.train as average

    (tmp_path / "quick-a.pt").write_bytes(b"")
    progress = {"seconds": 1800.0, "stopped": "time_limit"}
    stopped.payload = {"progress": progress, "ema": {"n_averaged": 900}}
    made = []
    ema = lambda path, out: made.append(path.name) or out
    monkeypatch.setattr(average, "ema_checkpoint", ema)

    def scored(path, **k):
        raise SystemExit(f"scored {path.name}")

    monkeypatch.setattr(checkpoint, "load_checkpoint", scored)
    with pytest.raises(SystemExit, match="scored quick-a.ema.pt"):
        stopped.run("quick", "a", "a change", None, [], resume=True)
    assert made == ["quick-a.pt"] and stopped.commands == []
    with pytest.raises(SystemExit, match="--average and --ema"):  # before any training
        stopped.run("quick", "b", "a change", None, ["--ema", "0.999"], average=3)


def speedrun(model, corpus, settings: dict, **kw) -> dict:
    """`train_run` with the speedrun's run, on `TINY_RUN` with `settings` changed."""
    more = dict(settings_class=SpeedrunSettings, run_class=Speedrun)
    return train_tiny(model, corpus, settings, **more, **kw)


def test_ema_is_the_moving_average_of_the_weights_after_each_update_and_resumes_exactly(
    corpus, tmp_path
):
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
    settings, more = dict(max_steps=3, ema=0.75), dict(resume=resumed.payload)
    speedrun(resumed.model, corpus, settings, checkpoint=tmp_path / "2.pt", **more)
    resumed_ema, straight_ema = (
        torch.load(tmp_path / p, weights_only=True)["ema"] for p in ("2.pt", "3.pt")
    )
    assert resumed_ema.keys() == straight_ema.keys()
    assert all(torch.equal(resumed_ema[k], straight_ema[k]) for k in straight_ema)
    with pytest.raises(ValueError, match="--ema"):
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
    sampler = loader.batch_sampler
    usual, drawn = sampler.usual, {}  # (source, target) pieces of each pair
    for epoch in (1, 2, 1):
        sampler.set_epoch(epoch)
        assert [len(b) for b in sampler] and sampler.lengths == loader.dataset.lengths()
        drawn.setdefault(epoch, []).append((loader.dataset.src, loader.dataset.tgt))
    assert drawn[1][0] == drawn[1][1] and drawn[1][0][0] != drawn[2][0][0] != usual[0]
    spell = lambda pieces: [corpus.src_vocab.sp.decode(ids) for ids in pieces]
    assert spell(drawn[2][0][0]) == spell(usual[0])
    assert spell(drawn[2][0][1]) == spell(usual[1])
    src, tgt = drawn[2][0]
    kept = [(s, t) == u for s, t, u in zip(src, tgt, zip(*usual))]
    # too long: the usual pieces
    assert all(max(len(s), len(t)) < 8 or k for s, t, k in zip(src, tgt, kept))
    assert any(max(len(s), len(t)) >= 8 for s, t in zip(src, tgt))  # and some were

    def model():
        torch.manual_seed(0)
        sizes = dict(d_model=16, n_heads=2, d_ff=32, n_layers=1, max_len=64)
        return Transformer(TransformerConfig(400, 400, **sizes))

    settings = dict(max_tokens=200, bpe_dropout=0.2)
    straight = model()
    speedrun(straight, corpus, settings | dict(max_steps=28))
    out = tmp_path / "run.pt"
    speedrun(model(), corpus, settings | dict(max_steps=24), checkpoint=out)
    ckpt = load_checkpoint(out)
    # mid-epoch, not the first
    progress = ckpt.payload["progress"]
    assert progress["epoch"] > 1 and progress["batch"] > 0
    speedrun(ckpt.model, corpus, settings | dict(max_steps=28), resume=ckpt.payload)
    assert same_weights(straight, ckpt.model)
    plain = model()
    speedrun(plain, corpus, dict(max_tokens=200, max_steps=28))
    assert not same_weights(plain, straight)  # the pieces were drawn


def test_a_run_records_where_each_stretch_of_it_computed(corpus, tmp_path):
    out, steps = tmp_path / "run.pt", lambda n: dict(epochs=5, max_steps=n)
    stretches = lambda run: [
        (s["from_update"], s["to_update"]) for s in run["sessions"]
    ]
    first = speedrun(tiny_model(corpus), corpus, steps(3), checkpoint=out)
    assert stretches(first) == [(0, 3)]
    # what assignment 3's rules read: the CPU, its cores and the threads
    assert re.fullmatch(r".+, \d+ cores, \d+ threads", first["sessions"][0]["machine"])
    resume = load_checkpoint(out, device="cpu").payload
    again = speedrun(
        tiny_model(corpus), corpus, steps(5), checkpoint=out, resume=resume
    )
    assert stretches(again) == [(0, 3), (3, 5)]
    resume = load_checkpoint(out, device="cpu").payload
    more = dict(checkpoint=tmp_path / "d.pt", resume=resume)
    done = speedrun(tiny_model(corpus), corpus, steps(5), **more)
    # a stretch without updates is not entered
    assert done["sessions"] == again["sessions"]


def test_warmdown_takes_the_rate_linearly_to_zero_at_the_budgets_end_and_resumes(
    corpus, tmp_path, monkeypatch
):
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
    stop, after_update = StopRequest(), Speedrun.after_update
    stop_at_5 = lambda run: (run.progress["step"] == 5 and stop()) or after_update(run)
    monkeypatch.setattr(Speedrun, "after_update", stop_at_5)
    path = tmp_path / "run.pt"
    speedrun(tiny_model(corpus), corpus, settings, checkpoint=path, stop=stop)
    monkeypatch.setattr(Speedrun, "after_update", after_update)
    ckpt = load_checkpoint(path)
    assert ckpt.payload["progress"]["step"] == 5
    resumed = speedrun(ckpt.model, corpus, settings, resume=ckpt.payload)
    assert resumed["history"]["lr"] == lr and same_weights(straight, ckpt.model)


def test_the_library_s_trainer_refuses_to_resume_a_speedrun_and_says_which_to_use(
    corpus, tmp_path, capsys
):
    out = tmp_path / "run.pt"
    speedrun(tiny_model(corpus), corpus, dict(max_steps=2), checkpoint=out)
    status, _, err = cli_call(capsys, "train", "--out", out, "--resume")
    assert status == 1 and err.count("\n") == 1, err
    # the one-line error names the settings the library's trainer lacks
    assert "bpe_dropout, ema, warmdown" in err
