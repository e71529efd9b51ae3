"""nmt_lib.training, checkpoint, corpus, trainer and cli: the schedule, accumulation,
checkpoints and resume."""

import json
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from nmt_lib.fast import sliced_batch_loss
from nmt_lib.run.checkpoint import CheckpointError, load_checkpoint
from nmt_lib.run.corpus import ParallelCorpus, detokenize, french_spacing
from nmt_lib.run.inference import evaluate_checkpoint
from nmt_lib.run.train_command import run_lock
from nmt_lib.run.trainer import RunSettings, new_progress
from nmt_lib.training import TrainSettings, accumulate, batch_loss, epoch_updates, fit
from nmt_lib.training import noam_lr, noam_schedule, smoothed_targets, token_loaders

from conftest import ROOT, cli_call, cli_run, german_lines, last_drawings, same_weights
from conftest import save_model, tiny_model, tiny_train_args, train_tiny


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
    adam = lambda: torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=0.5)
    optimizer = adam()
    schedule = noam_schedule(optimizer, d_model=64, warmup=10)
    rates = []
    for _ in range(30):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert rates == pytest.approx(
        [noam_lr(s, d_model=64, warmup=10, factor=0.5) for s in range(1, 31)], rel=1e-12
    )
    again = noam_schedule(adam(), d_model=64, warmup=10)
    again.load_state_dict(schedule.state_dict())
    assert again.last_epoch == 30 and again.get_last_lr() == schedule.get_last_lr()


@pytest.mark.parametrize("cls", [TrainSettings, RunSettings])
def test_train_settings_reject_bad_values(cls):
    either = dict(epochs=0, max_tokens=0, label_smoothing=1.0, clip=0.0)
    either["lr_factor"] = float("nan")
    run_only = dict(checkpoint_every=-1, loss="fancy", time_limit=0.0, max_steps=0)
    run_only["precision"] = "fp8"
    for name, value in (either | run_only).items():
        # the lesson's settings have none of the run's fields
        lesson_lacks = cls is TrainSettings and name in run_only
        with pytest.raises(TypeError if lesson_lacks else ValueError):
            cls(**{name: value})


def test_corpus_reads_any_tsv_ignoring_extra_columns_and_keeps_raw_references(
    de_corpus,
):
    corpus = ParallelCorpus(de_corpus, min_freq=1, valid_frac=0.1, test_frac=0.1)
    assert sum(map(len, corpus.splits)) == len(german_lines())
    # third column ignored
    assert "hund" in corpus.tgt_vocab and "cc-by" not in corpus.tgt_vocab
    assert corpus.settings["french_spacing"] is False  # German: "nicht müde!"
    src, tgt = corpus.splits.test[0]
    assert tgt.islower() and any(r[0].isupper() for r in corpus.raw_refs[src])
    assert ParallelCorpus.from_settings(corpus.settings).splits == corpus.splits


def test_french_spacing_and_detokenize():
    assert french_spacing(["Va !", "Qui ?", "Cours !"])
    assert not french_spacing(["Geh!", "Wer?", "Lauf!"])
    assert detokenize("je suis là , non ?", french=True) == "je suis là, non ?"
    assert detokenize(["wer", "ist", "da", "?"], french=False) == "wer ist da?"
    assert detokenize("il est parti .") == "il est parti."


def test_gradient_accumulation_equals_one_big_batch(corpus):
    grads = []
    # many micro-batches accumulated vs the whole split in one batch
    for max_tokens, micro_batches in ((40, 10), (4000, 1)):
        model = tiny_model(corpus, dropout=0.0)
        settings = TrainSettings(max_tokens=max_tokens, tokens_per_update=10**6)
        (update,) = epoch_updates(token_loaders(corpus, settings)[0], 1, 10**6)
        assert len(update) >= micro_batches
        _, tokens = accumulate(model, update, settings, corpus.tgt_vocab.pad_id)
        grads.append([p.grad / tokens for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("fast", [False, True])
def test_resumed_training_takes_the_same_steps_bit_for_bit(corpus, tmp_path, fast):
    base = dict(loss="sliced", fused_adam=True, fast_dropout=True) if fast else {}
    straight = tiny_model(corpus)
    train_tiny(straight, corpus, base | dict(max_steps=9))
    path = tmp_path / "run.pt"
    train_tiny(tiny_model(corpus), corpus, base | dict(max_steps=4), checkpoint=path)
    ckpt = load_checkpoint(path)
    progress = ckpt.payload["progress"]
    assert progress["step"] == 4 and progress["batch"] > 0  # mid-epoch
    assert ckpt.payload["schedule"]["last_epoch"] == 4
    torch.manual_seed(12345)  # whatever the global RNG holds now must not matter
    resumed = train_tiny(
        ckpt.model, corpus, base | dict(max_steps=9), resume=ckpt.payload
    )
    assert resumed["step"] == 9 and resumed["history"]["lr"] == [
        noam_lr(s, d_model=16, warmup=3, factor=0.5) for s in range(1, 10)
    ]
    assert same_weights(straight, ckpt.model)


def test_the_plain_and_the_sliced_loss_agree_in_value_and_gradients(corpus):
    model = tiny_model(corpus).eval()  # no dropout: the two paths see the same numbers
    batch = next(iter(corpus.loader("train", batch_size=8)))
    assert (batch.tgt_out == 0).any()  # the batch has padding to skip
    results = []
    for loss_fn in (batch_loss, sliced_batch_loss):
        model.zero_grad(set_to_none=True)
        value, n = loss_fn(model, batch, TrainSettings(label_smoothing=0.1), pad_id=0)
        value.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        results.append((value.detach(), n, grads))
    (a, n_a, grads_a), (b, n_b, grads_b) = results
    assert n_a == n_b == int((batch.tgt_out != 0).sum())
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for g, h in zip(grads_a, grads_b):
        torch.testing.assert_close(g, h, rtol=1e-4, atol=1e-6)


@pytest.fixture
def saved(tmp_path, corpus):
    """A checkpoint of an untrained `tiny_model`: its path and the model."""
    model = tiny_model(corpus)
    return save_model(tmp_path / "m.pt", model, corpus), model


def test_a_checkpoint_without_training_state_cannot_be_resumed_and_says_so(
    tmp_path, corpus, capsys
):
    # as a learner's own `save` may write it: no schedule
    model = tiny_model(corpus)
    adam = torch.optim.Adam(model.parameters())
    own = dict(
        train=RunSettings(), progress=dict(new_progress(), step=1), optimizer=adam
    )
    path = save_model(tmp_path / "own.pt", model, corpus, **own)
    status, _, err = cli_call(capsys, "train", "--out", path, "--resume")
    assert status == 1 and "holds no training state" in err


def test_checkpoint_round_trip_keeps_weights_vocabularies_and_settings(
    saved, de_corpus
):
    path, model = saved
    ckpt = load_checkpoint(path)
    assert same_weights(model, ckpt.model) and not ckpt.model.training
    assert ckpt.payload["data"]["path"] == str(de_corpus)
    assert ckpt.tgt_vocab.idx_to_token[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]


def test_truncated_garbage_and_foreign_checkpoints_give_clear_errors(tmp_path, saved):
    data = saved[0].read_bytes()
    for content in (data[: len(data) // 2], b"not a checkpoint at all", b""):
        (tmp_path / "bad.pt").write_bytes(content)
        with pytest.raises(CheckpointError, match="not a readable checkpoint"):
            load_checkpoint(tmp_path / "bad.pt")
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


def test_loading_runs_no_code_and_refuses_weights_that_do_not_fit(tmp_path, saved):
    payload = torch.load(saved[0], weights_only=True)
    torch.save(dict(payload, extra=Payload()), tmp_path / "code.pt")
    with pytest.raises(CheckpointError, match="could run code") as err:
        load_checkpoint(tmp_path / "code.pt")
    # torch's advice to load it unsafely is not repeated
    assert "weights_only" not in str(err.value)
    shape = dict(payload, config=dict(payload["config"], d_ff=48))
    torch.save(shape, tmp_path / "shape.pt")
    with pytest.raises(CheckpointError, match="do not fit"):
        load_checkpoint(tmp_path / "shape.pt")


@pytest.mark.skipif(
    not (ROOT / "models" / "tatoeba-en-fr").is_dir(), reason="no published model"
)
def test_translating_imports_no_training_code_nor_pandas():
    training = (
        "pandas nmt_lib.loop nmt_lib.training nmt_lib.recipes nmt_lib.run.settings"
        " nmt_lib.run.trainer nmt_lib.run.parallel"
    ).split()
    script = (
        "import sys; from nmt_lib.run import cli; status = cli.main(['translate',"
        " '--model', 'published', '--device', 'cpu']); print(*sorted(m for m in"
        f" sys.modules if m in {training}), file=sys.stderr); sys.exit(status)"
    )
    kw = dict(input="I am tired.\n", capture_output=True, text=True, cwd=ROOT)
    out = subprocess.run([sys.executable, "-c", script], **kw, timeout=300)
    assert out.returncode == 0 and out.stdout.count("\n") == 1, out.stderr
    assert out.stderr.strip() == ""


def test_cli_trains_translates_and_evaluates_english_german(
    tmp_path, de_corpus, capsys
):
    # training in this process; python -m nmt_lib translates and evaluates
    ckpt = tmp_path / "de.pt"
    status, _, err = cli_call(
        capsys, *tiny_train_args(de_corpus, ckpt, "--max-steps", 4)
    )
    assert status == 0 and load_checkpoint(ckpt).step == 4, err
    status, _, err = cli_call(capsys, *tiny_train_args(de_corpus, ckpt))
    assert status == 1 and "pass --resume" in err
    resume = "--resume --max-steps 6 --progress none".split()
    status, _, err = cli_call(capsys, "train", "--out", ckpt, *resume)
    assert status == 0 and load_checkpoint(ckpt).step == 6, err

    lines = "I am tired.\n\nWe have a dog.\nYou see the cat?\n"
    out = cli_run("translate", "--checkpoint", ckpt, "--beam", 2, stdin=lines)
    assert out.returncode == 0, out.stderr
    # One line out per line in, in order; an empty line stays empty. (After 6 updates
    # the model may well answer <eos> at once, so the other lines may be empty too:
    # their content is not checked.)
    translations = out.stdout.split("\n")[:-1]
    assert len(translations) == 4 and translations[1] == ""
    out = cli_run(
        "translate", "--checkpoint", ckpt, "--tokenized", stdin="I am tired.\n" * 3
    )
    assert out.returncode == 0 and len(set(out.stdout.split("\n")[:-1])) == 1
    assert out.stdout.count("\n") == 3

    record = tmp_path / "records" / "de.json"
    out = cli_run("evaluate", "--checkpoint", ckpt, "--record", record)
    assert out.returncode == 0, out.stderr
    score = float(out.stdout.split("BLEU = ")[1].split()[0])
    # the library's score, in this process
    expected = evaluate_checkpoint(load_checkpoint(ckpt))
    assert score == pytest.approx(expected.sacrebleu, abs=0.005)
    # --record: the same scores as JSON, with what they are the scores of and where they
    # were made; the course's lowercased model is scored lowercased
    saved = json.loads(record.read_text())
    assert saved["sacrebleu"] == pytest.approx(score, abs=0.005)
    assert saved["signature"] in out.stdout and "case:lc" in saved["signature"]
    assert saved["chrf"] == pytest.approx(expected.chrf)
    assert saved["training"]["updates"] == 6 and saved["data"]["file"] == "deu.txt"
    assert "path" not in saved["data"]
    assert saved["model"]["parameters"] == sum(
        p.numel() for p in load_checkpoint(ckpt).model.parameters()
    )
    assert saved["command"].endswith(f"--record {record}")
    assert saved["machine"]["cpu"] and saved["recorded"]
    # a folder: a one-line error
    status, out, err = cli_call(
        capsys, "evaluate", "--checkpoint", ckpt, "--record", tmp_path
    )
    assert status == 1 and err.count("\n") == 1


def test_the_lessons_fit_shows_each_epochs_bar_and_then_its_held_out_loss(
    corpus, capsys
):
    settings = TrainSettings(epochs=2, max_tokens=60, tokens_per_update=100, warmup=3)
    held_out = fit(tiny_model(corpus), corpus, settings)["history"]["valid_loss"]
    shown = capsys.readouterr()
    # a bar for each epoch, then a line that gives its held-out loss
    assert len(last_drawings(shown.err)) == len(shown.out.splitlines()) == 2
    for line, loss in zip(shown.out.splitlines(), held_out):
        assert any(abs(float(x) - loss) < 1e-3 for x in re.findall(r"\d+\.\d+", line))
    fit(tiny_model(corpus), corpus, settings, quiet=True)
    assert capsys.readouterr() == ("", "")


# ---------------------------------------------------------------- the command line:
# never losing work


def test_a_changed_or_moved_corpus_is_named_and_refused(tmp_path, de_corpus, capsys):
    out = tmp_path / "c.pt"
    assert cli_call(capsys, *tiny_train_args(de_corpus, out, "--max-steps", 2))[0] == 0
    changed = tmp_path / "changed.txt"
    changed.write_text(de_corpus.read_text() + "Go!\tLos!\tCC-BY\n")
    resume = ["train", "--out", out, "--resume", "--data", changed, "--max-steps", 3]
    status, _, err = cli_call(capsys, *resume)
    assert status == 1 and "--data-changed-ok" in err
    assert cli_call(capsys, *resume, "--data-changed-ok")[0] == 0
    # the run goes on with the new file
    assert load_checkpoint(out).payload["data"]["path"] == str(changed)
    changed.rename(tmp_path / "elsewhere.txt")
    status, _, err = cli_call(capsys, "evaluate", "--checkpoint", out)
    assert status == 1 and "not there any more" in err
    evaluate = ["evaluate", "--checkpoint", out, "--data", tmp_path / "elsewhere.txt"]
    assert cli_call(capsys, *evaluate)[0] == 0


def test_a_second_run_on_the_same_checkpoint_is_refused_and_a_dead_runs_lock_taken_over(
    tmp_path, de_corpus
):
    out = tmp_path / "l.pt"
    with run_lock(out):  # another run holds it
        busy = cli_run(*tiny_train_args(de_corpus, out, "--max-steps", 1))
    assert busy.returncode == 1 and not out.exists()
    assert f"pid {os.getpid()}" in busy.stderr  # the error names the run that holds it
    # left by a run that died: nobody holds it
    (tmp_path / ".l.pt.lock").write_text("999999999\n")
    assert cli_run(*tiny_train_args(de_corpus, out, "--max-steps", 1)).returncode == 0


def test_evaluate_checkpoint_scores_the_same_on_a_corpus_built_once(saved, de_corpus):
    ckpt = load_checkpoint(saved[0], device="cpu")
    built = ParallelCorpus.from_settings(ckpt.payload["data"])
    score = evaluate_checkpoint(ckpt).sacrebleu
    assert evaluate_checkpoint(ckpt, corpus=built).sacrebleu == score
    other = ParallelCorpus(de_corpus, min_freq=1, seed=7)  # another split
    with pytest.raises(ValueError):
        evaluate_checkpoint(ckpt, corpus=other)
