"""nmt_lib.training, checkpoint, corpus, trainer and cli: the schedule, accumulation,
checkpoints and resume."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from nmt_lib.base import cache
from nmt_lib.run import trainer
from nmt_lib.run.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from nmt_lib.run.corpus import ParallelCorpus, detokenize, french_spacing
from nmt_lib.run.inference import evaluate_checkpoint
from nmt_lib.fast import sliced_batch_loss
from nmt_lib.run.trainer import RunSettings, train_run
from nmt_lib.training import (
    Hooks,
    TrainSettings,
    batch_loss,
    fit,
    new_progress,
    noam_lr,
    noam_schedule,
    smoothed_targets,
)

from conftest import (
    TINY_ARGS,
    TINY_RUN,
    cli_call,
    german_lines,
    last_drawings,
    tiny_model,
)

ROOT = Path(__file__).resolve().parent.parent


def test_noam_lr_rises_linearly_peaks_at_warmup_then_decays_as_inverse_sqrt():
    kw = dict(d_model=512, warmup=4000)
    assert noam_lr(2, **kw) == pytest.approx(2 * noam_lr(1, **kw))
    assert noam_lr(4000, **kw) == pytest.approx(512**-0.5 * 4000**-0.5)
    assert noam_lr(3999, **kw) < noam_lr(4000, **kw) > noam_lr(4001, **kw)
    assert noam_lr(16000, **kw) == pytest.approx(noam_lr(4000, **kw) / 2)
    assert noam_lr(100, factor=2.0, **kw) == pytest.approx(2 * noam_lr(100, **kw))


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_smoothed_targets_sum_to_one_and_match_pytorch_label_smoothing(eps):
    torch.manual_seed(0)
    logits, targets = torch.randn(7, 11), torch.randint(11, (7,))
    q = smoothed_targets(targets, 11, eps)
    torch.testing.assert_close(q.sum(1), torch.ones(7))
    assert torch.all(q.argmax(1) == targets)
    explicit = -(q * logits.log_softmax(-1)).sum(-1).mean()
    torch.testing.assert_close(
        explicit, F.cross_entropy(logits, targets, label_smoothing=eps)
    )


def test_the_schedule_is_a_lambda_lr_that_follows_the_formula_and_saves_its_place():
    optimizer = torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=0.5)
    schedule = noam_schedule(optimizer, d_model=64, warmup=10)
    rates = []
    for _ in range(30):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert rates == pytest.approx(
        [noam_lr(s, d_model=64, warmup=10, factor=0.5) for s in range(1, 31)], rel=1e-12
    )
    again = noam_schedule(
        torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=0.5),
        d_model=64,
        warmup=10,
    )
    again.load_state_dict(schedule.state_dict())
    assert again.last_epoch == 30 and again.get_last_lr() == schedule.get_last_lr()


@pytest.mark.parametrize("cls", [TrainSettings, RunSettings])
def test_train_settings_reject_bad_values(cls):
    for bad in [
        dict(epochs=0),
        dict(max_tokens=0),
        dict(label_smoothing=1.0),
        dict(max_steps=0),
        dict(lr_factor=float("nan")),
        dict(clip=0.0),
    ]:
        with pytest.raises(ValueError):
            cls(**bad)
    for bad in [
        dict(checkpoint_every=-1),
        dict(loss="fancy"),
        dict(time_limit=0.0),
        dict(precision="fp8"),
    ]:
        # the lesson's has no such field
        with pytest.raises(ValueError if cls is RunSettings else TypeError):
            cls(**bad)


def test_corpus_reads_any_tsv_ignoring_extra_columns_and_keeps_raw_references(
    de_corpus,
):
    corpus = ParallelCorpus(de_corpus, min_freq=1, valid_frac=0.1, test_frac=0.1)
    n = len(german_lines())
    assert sum(map(len, corpus.splits)) == n
    # third column ignored
    assert "hund" in corpus.tgt_vocab and "cc-by" not in corpus.tgt_vocab
    assert corpus.settings["french_spacing"] is False  # German: "nicht müde!"
    src, tgt = corpus.splits.test[0]
    assert tgt.islower() and any(r[0].isupper() for r in corpus.raw_refs[src])
    assert ParallelCorpus.from_settings(corpus.settings).splits == corpus.splits


def test_french_spacing_and_detokenize():
    assert french_spacing(["Va !", "Qui ?", "Cours !"]) and not french_spacing(
        ["Geh!", "Wer?", "Lauf!"]
    )
    assert detokenize("je suis là , non ?", french=True) == "je suis là, non ?"
    assert detokenize(["wer", "ist", "da", "?"], french=False) == "wer ist da?"
    assert detokenize("il est parti .") == "il est parti."


def weights(model):
    return [p.detach().clone() for p in model.parameters()]


class PlainSGD(Hooks):
    """Plain SGD at rate 1: the step is the gradient (Adam's first step is about
    sign(g), which would blow float round-off on near-zero gradients up to full
    steps)."""

    def begin(self, model, settings):
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        return (
            optimizer,
            torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0),
            new_progress(),
        )


def test_gradient_accumulation_equals_one_big_batch(de_corpus):
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    runs = []
    for max_tokens in (
        40,
        4000,
    ):  # many micro-batches accumulated vs the whole split in one batch
        model = tiny_model(corpus, dropout=0.0)
        settings = TrainSettings(
            epochs=1,
            max_tokens=max_tokens,
            tokens_per_update=10**6,
            warmup=1,
            clip=None,
        )
        progress = fit(model, corpus, settings, hooks=PlainSGD(), quiet=True)
        assert progress["step"] == 1
        runs.append(weights(model))
    before = weights(tiny_model(corpus, dropout=0.0))
    assert any(not torch.equal(a, b) for a, b in zip(runs[0], before))
    for a, b in zip(*runs):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("fast", [False, True])
def test_resumed_training_takes_the_same_steps_bit_for_bit(de_corpus, tmp_path, fast):
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    fast_ones = dict(loss="sliced", fused_adam=True, fast_dropout=True)
    base = TINY_RUN | (fast_ones if fast else {})
    straight = tiny_model(corpus)
    train_run(straight, corpus, RunSettings(max_steps=9, **base), report="none")

    path = tmp_path / "run.pt"
    first = tiny_model(corpus)
    train_run(
        first,
        corpus,
        RunSettings(max_steps=4, **base),
        checkpoint=path,
        save_kwargs={"data": corpus.settings},
        report="none",
    )
    ckpt = load_checkpoint(path)
    # mid-epoch
    assert (
        ckpt.payload["progress"]["step"] == 4 and ckpt.payload["progress"]["batch"] > 0
    )
    assert ckpt.payload["schedule"]["last_epoch"] == 4
    torch.manual_seed(12345)  # whatever the global RNG holds now must not matter
    resumed = train_run(
        ckpt.model,
        corpus,
        RunSettings(max_steps=9, **base),
        resume=ckpt.payload,
        report="none",
    )
    assert resumed["step"] == 9 and len(resumed["history"]["lr"]) == 9
    assert resumed["history"]["lr"] == [
        noam_lr(s, d_model=16, warmup=3, factor=0.5) for s in range(1, 10)
    ]
    for a, b in zip(weights(straight), weights(ckpt.model)):
        assert torch.equal(a, b)


def test_the_plain_and_the_sliced_loss_agree_in_value_and_gradients(de_corpus):
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    model = tiny_model(corpus).eval()  # no dropout: the two paths see the same numbers
    batch = next(iter(corpus.loader("train", batch_size=8)))
    assert (batch.tgt_out == 0).any()  # the batch has padding to skip
    results = []
    for loss_fn in (batch_loss, sliced_batch_loss):
        model.zero_grad(set_to_none=True)
        value, n = loss_fn(model, batch, TrainSettings(label_smoothing=0.1), pad_id=0)
        value.backward()
        results.append(
            (value.detach(), n, [p.grad.clone() for p in model.parameters()])
        )
    (a, n_a, grads_a), (b, n_b, grads_b) = results
    assert n_a == n_b == int((batch.tgt_out != 0).sum())
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for g, h in zip(grads_a, grads_b):
        torch.testing.assert_close(g, h, rtol=1e-4, atol=1e-6)


def saved(tmp_path, de_corpus, name="m.pt"):
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    model = tiny_model(corpus)
    return (
        save_checkpoint(
            tmp_path / name,
            model,
            corpus.src_vocab,
            corpus.tgt_vocab,
            data=corpus.settings,
        ),
        model,
    )


def test_a_checkpoint_without_training_state_cannot_be_resumed_and_says_so(
    tmp_path, de_corpus, capsys
):
    # as a learner's own hook may save it: no schedule
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    model = tiny_model(corpus)
    path = save_checkpoint(
        tmp_path / "own.pt",
        model,
        corpus.src_vocab,
        corpus.tgt_vocab,
        data=corpus.settings,
        train=RunSettings(),
        progress=dict(new_progress(), step=1),
        optimizer=torch.optim.Adam(model.parameters()),
    )
    status, _, err = cli_call(capsys, "train", "--out", path, "--resume")
    assert status == 1 and "holds no training state" in err


def test_checkpoint_round_trip_keeps_weights_vocabularies_and_settings(
    tmp_path, de_corpus
):
    path, model = saved(tmp_path, de_corpus)
    ckpt = load_checkpoint(path)
    for a, b in zip(model.state_dict().values(), ckpt.model.state_dict().values()):
        assert torch.equal(a, b)
    assert ckpt.payload["data"]["path"] == str(de_corpus)
    assert (
        ckpt.tgt_vocab.idx_to_token[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
        and not ckpt.model.training
    )


def test_truncated_garbage_and_foreign_checkpoints_give_clear_errors(
    tmp_path, de_corpus
):
    path, _ = saved(tmp_path, de_corpus)
    data = path.read_bytes()
    cases = {
        "truncated": data[: len(data) // 2],
        "garbage": b"not a checkpoint at all",
        "empty": b"",
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(CheckpointError, match="not a readable checkpoint"):
            load_checkpoint(tmp_path / name)
    torch.save({"state_dict": {}}, tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="not a course checkpoint"):
        load_checkpoint(tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")


class Payload:
    """Not a tensor or a plain container: unpickled, it would call os.system (with a
    harmless command), so safe loading must refuse to rebuild it."""

    def __reduce__(self):
        return os.system, ("true",)


def test_loading_runs_no_code_and_refuses_weights_that_do_not_fit(tmp_path, de_corpus):
    path, _ = saved(tmp_path, de_corpus)
    payload = torch.load(path, weights_only=True)
    torch.save(dict(payload, extra=Payload()), tmp_path / "code.pt")
    with pytest.raises(CheckpointError, match="could run code") as err:
        load_checkpoint(tmp_path / "code.pt")
    # torch's advice to load it unsafely is not repeated
    assert "weights_only" not in str(err.value)
    torch.save(
        dict(payload, config=dict(payload["config"], d_ff=48)), tmp_path / "shape.pt"
    )
    with pytest.raises(CheckpointError, match="do not fit"):
        load_checkpoint(tmp_path / "shape.pt")


def test_save_is_atomic_a_failed_save_keeps_the_old_file(
    tmp_path, de_corpus, monkeypatch
):
    path, model = saved(tmp_path, de_corpus)
    before = path.read_bytes()

    def broken_save(obj, f):
        Path(f).write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(cache.torch, "save", broken_save)
    ckpt = load_checkpoint(path)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, model, ckpt.src_vocab, ckpt.tgt_vocab, data={})
    assert path.read_bytes() == before and sorted(
        p.name for p in tmp_path.iterdir()
    ) == ["deu.txt", "m.pt"]


def cli_run(*args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "nmt_lib", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )


@pytest.mark.skipif(
    not (ROOT / "models" / "tatoeba-en-fr").is_dir(), reason="no published model"
)
def test_translating_imports_neither_the_trainer_nor_data_parallelism():
    script = (
        "import sys; from nmt_lib.run import cli; status = cli.main(['translate',"
        " '--model', 'published', '--device', 'cpu']); print(*sorted(m for m in"
        " sys.modules if m in ('nmt_lib.run.trainer', 'nmt_lib.run.parallel')),"
        " file=sys.stderr); sys.exit(status)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        input="I am tired.\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0 and out.stdout.count("\n") == 1, out.stderr
    assert out.stderr.strip() == ""


def test_cli_trains_translates_and_evaluates_english_german(
    tmp_path, de_corpus, capsys
):
    # training in this process; python -m nmt_lib translates and evaluates
    ckpt = tmp_path / "de.pt"
    status, out, err = cli_call(
        capsys,
        "train",
        "--data",
        de_corpus,
        "--d-model",
        16,
        "--heads",
        2,
        "--d-ff",
        32,
        "--layers",
        1,
        "--max-steps",
        4,
        "--max-tokens",
        80,
        "--tokens-per-update",
        100,
        "--warmup",
        2,
        "--min-freq",
        1,
        "--out",
        ckpt,
        "--progress",
        "none",
    )
    assert (
        status == 0 and "trained 4 updates" in out and load_checkpoint(ckpt).step == 4
    ), err
    status, _, err = cli_call(
        capsys, "train", "--data", de_corpus, "--out", ckpt, "--progress", "none"
    )
    assert status == 1 and "exists; pass --resume" in err
    status, _, err = cli_call(
        capsys,
        "train",
        "--out",
        ckpt,
        "--resume",
        "--max-steps",
        6,
        "--progress",
        "none",
    )
    assert status == 0 and "resuming" in err and load_checkpoint(ckpt).step == 6, err

    lines = "I am tired.\n\nWe have a dog.\nYou see the cat?\n"
    out = cli_run("translate", "--checkpoint", ckpt, "--beam", 2, stdin=lines)
    assert out.returncode == 0, out.stderr
    translations = out.stdout.split("\n")[:-1]
    # One line out per line in, in order; an empty line stays empty. (After 6 updates
    # the model may well answer <eos> at once, so the other lines may be empty too:
    # their content is not checked.)
    assert len(translations) == 4 and translations[1] == ""
    out = cli_run(
        "translate", "--checkpoint", ckpt, "--tokenized", stdin="I am tired.\n" * 3
    )
    assert (
        out.returncode == 0
        and len(set(out.stdout.split("\n")[:-1])) == 1
        and out.stdout.count("\n") == 3
    )

    record = tmp_path / "records" / "de.json"
    out = cli_run("evaluate", "--checkpoint", ckpt, "--record", record)
    assert out.returncode == 0, out.stderr
    assert (
        "signature: nrefs:" in out.stdout
        and "case:lc" in out.stdout
        and "tok:13a" in out.stdout
    )
    # chrF beside BLEU, with its signature
    assert "chrF = " in out.stdout and "nc:6|nw:0" in out.stdout
    score = float(out.stdout.split("BLEU = ")[1].split()[0])
    # the library's score, in this process
    expected = evaluate_checkpoint(load_checkpoint(ckpt))
    assert (
        score == pytest.approx(expected["sacrebleu"], abs=0.005)
        and f"{expected['sentences']:,} distinct sentences" in out.stdout
    )
    # --record: the same scores as JSON, with what they are the scores of and where they
    # were made
    saved = json.loads(record.read_text())
    assert (
        saved["sacrebleu"] == pytest.approx(score, abs=0.005)
        and saved["signature"] in out.stdout
    )
    assert (
        saved["training"]["updates"] == 6
        and saved["data"]["file"] == "deu.txt"
        and "path" not in saved["data"]
    )
    assert saved["model"]["parameters"] == sum(
        p.numel() for p in load_checkpoint(ckpt).model.parameters()
    )
    assert (
        saved["command"].endswith(f"--record {record}")
        and saved["machine"]["cpu"]
        and saved["recorded"]
    )
    # a folder
    status, out, err = cli_call(
        capsys, "evaluate", "--checkpoint", ckpt, "--record", tmp_path
    )
    assert status == 1 and "Is a directory" in err and err.count("\n") == 1


def test_the_lessons_fit_shows_each_epochs_bar_and_then_its_held_out_loss(
    de_corpus, capsys
):
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    settings = TrainSettings(epochs=2, max_tokens=60, tokens_per_update=100, warmup=3)
    fit(tiny_model(corpus), corpus, settings)
    shown = capsys.readouterr()
    drawn = last_drawings(shown.err)
    assert [line.split(":")[0] for line in drawn] == ["epoch 1/2", "epoch 2/2"]
    assert all("100%" in line and "tok/s" in line for line in drawn)
    said = shown.out.splitlines()
    assert [line.split(":")[0] for line in said] == ["epoch 1", "epoch 2"]
    assert all("valid loss" in line and "perplexity" in line for line in said)
    fit(tiny_model(corpus), corpus, settings, quiet=True)
    assert capsys.readouterr() == ("", "")


# ---------------------------------------------------------------- the command line:
# never losing work


def tiny_train_args(corpus, out, *extra):
    return ["train", "--data", corpus, *TINY_ARGS, "--out", out, *extra]


def test_a_changed_or_moved_corpus_is_named_and_refused(tmp_path, de_corpus, capsys):
    out = tmp_path / "c.pt"
    assert cli_call(capsys, *tiny_train_args(de_corpus, out, "--max-steps", 2))[0] == 0
    changed = tmp_path / "changed.txt"
    changed.write_text(de_corpus.read_text() + "Go!\tLos!\tCC-BY\n")
    status, _, err = cli_call(
        capsys,
        "train",
        "--out",
        out,
        "--resume",
        "--data",
        changed,
        "--max-steps",
        3,
        "--progress",
        "none",
    )
    assert status == 1 and "--data-changed-ok" in err and "differs" in err
    status, _, err = cli_call(
        capsys,
        "train",
        "--out",
        out,
        "--resume",
        "--data",
        changed,
        "--data-changed-ok",
        "--max-steps",
        3,
        "--progress",
        "none",
    )
    assert status == 0 and "warning" in err
    # the run goes on with the new file
    assert load_checkpoint(out).payload["data"]["path"] == str(changed)
    changed.rename(tmp_path / "elsewhere.txt")
    status, _, err = cli_call(capsys, "evaluate", "--checkpoint", out)
    assert status == 1 and "--data" in err and "not there any more" in err
    assert (
        cli_call(
            capsys,
            "evaluate",
            "--checkpoint",
            out,
            "--data",
            tmp_path / "elsewhere.txt",
        )[0]
        == 0
    )


def test_a_second_run_on_the_same_checkpoint_is_refused_and_a_dead_runs_lock_taken_over(
    tmp_path, de_corpus
):
    out = tmp_path / "l.pt"
    with trainer.run_lock(out):  # another run holds it
        busy = cli_run(*tiny_train_args(de_corpus, out, "--max-steps", 1))
    assert (
        busy.returncode == 1
        and f"pid {os.getpid()}" in busy.stderr
        and not out.exists()
    )
    # left by a run that died: nobody holds it
    (tmp_path / ".l.pt.lock").write_text("999999999\n")
    assert cli_run(*tiny_train_args(de_corpus, out, "--max-steps", 1)).returncode == 0


def test_evaluate_checkpoint_scores_the_same_on_a_corpus_built_once(
    tmp_path, de_corpus
):
    path, _ = saved(tmp_path, de_corpus)
    ckpt = load_checkpoint(path, device="cpu")
    built = ParallelCorpus.from_settings(ckpt.payload["data"])
    assert (
        evaluate_checkpoint(ckpt, corpus=built)["sacrebleu"]
        == evaluate_checkpoint(ckpt)["sacrebleu"]
    )
    other = ParallelCorpus(de_corpus, min_freq=1, seed=7)  # another split
    with pytest.raises(
        ValueError, match="not built with the checkpoint's data settings"
    ):
        evaluate_checkpoint(ckpt, corpus=other)
