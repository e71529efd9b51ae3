"""nmt_lib.training: schedule, label smoothing, accumulation, checkpoints, resume and the CLI."""
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from nmt_lib import training
from nmt_lib.training import (CheckpointError, ParallelCorpus, TrainSettings, detokenize, fit, french_spacing,
                              linear_cross_entropy, load_checkpoint, noam_lr, save_checkpoint, smoothed_targets)
from nmt_lib.transformer import Transformer, TransformerConfig

ROOT = Path(__file__).resolve().parent.parent

# A small English-German corpus built from templates: every line is "english<TAB>german<TAB>note".
SUBJECTS = [("i", "ich", "bin", "habe", "sehe"), ("you", "du", "bist", "hast", "siehst"),
            ("we", "wir", "sind", "haben", "sehen"), ("they", "sie", "sind", "haben", "sehen")]
ADJECTIVES = [("tired", "müde"), ("happy", "glücklich"), ("cold", "kalt"), ("hungry", "hungrig"), ("late", "spät")]
NOUNS = [("a dog", "einen Hund"), ("a car", "ein Auto"), ("the house", "das Haus"), ("a book", "ein Buch"),
         ("the cat", "die Katze")]


def be_form(en):
    return {"i": "am", "you": "are", "we": "are", "they": "are"}[en]


def german_lines():
    lines = []
    for en, de, sein, haben, sehen in SUBJECTS:
        cap, de_cap = en.capitalize(), de.capitalize()
        for adj_en, adj_de in ADJECTIVES:
            lines.append(f"{cap} {be_form(en)} {adj_en}.\t{de_cap} {sein} {adj_de}.\tCC-BY test")
            lines.append(f"{cap} {be_form(en)} not {adj_en}!\t{de_cap} {sein} nicht {adj_de}!\tCC-BY test")
        for noun_en, noun_de in NOUNS:
            verb = "have" if en != "he" else "has"
            lines.append(f"{cap} {verb} {noun_en}.\t{de_cap} {haben} {noun_de}.\tCC-BY test")
            lines.append(f"{cap} see {noun_en}?\t{de_cap} {sehen} {noun_de}?\tCC-BY test")
    return lines


@pytest.fixture
def de_corpus(tmp_path):
    path = tmp_path / "deu.txt"
    path.write_text("\n".join(german_lines()) + "\n", encoding="utf-8")
    return path


def tiny_model(corpus, dropout=0.1):
    torch.manual_seed(3)
    return Transformer(TransformerConfig(len(corpus.src_vocab), len(corpus.tgt_vocab), d_model=16, n_heads=2,
                                         d_ff=32, n_layers=1, dropout=dropout, max_len=32))


def test_noam_lr_rises_linearly_peaks_at_warmup_then_decays_as_inverse_sqrt():
    kw = dict(d_model=512, warmup=4000)
    assert noam_lr(2, **kw) == pytest.approx(2 * noam_lr(1, **kw))
    assert noam_lr(4000, **kw) == pytest.approx(512 ** -0.5 * 4000 ** -0.5)
    assert noam_lr(3999, **kw) < noam_lr(4000, **kw) > noam_lr(4001, **kw)
    assert noam_lr(16000, **kw) == pytest.approx(noam_lr(4000, **kw) / 2)
    assert noam_lr(100, factor=2.0, **kw) == pytest.approx(2 * noam_lr(100, **kw))
    with pytest.raises(ValueError):
        noam_lr(0, **kw)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_smoothed_targets_sum_to_one_and_match_pytorch_label_smoothing(eps):
    torch.manual_seed(0)
    logits, targets = torch.randn(7, 11), torch.randint(11, (7,))
    q = smoothed_targets(targets, 11, eps)
    torch.testing.assert_close(q.sum(1), torch.ones(7))
    assert torch.all(q.argmax(1) == targets)
    explicit = -(q * logits.log_softmax(-1)).sum(-1).mean()
    torch.testing.assert_close(explicit, F.cross_entropy(logits, targets, label_smoothing=eps))
    with pytest.raises(ValueError):
        smoothed_targets(targets, 11, 1.0)


def _loss_and_grads(loss_of, hidden, layer, scale):
    hidden.grad = None
    layer.zero_grad(set_to_none=True)
    loss = loss_of()
    (loss * scale).backward()
    return [loss.detach(), hidden.grad, layer.weight.grad, None if layer.bias is None else layer.bias.grad]


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("rows", [1, 7, 64, 1000])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_cross_entropy_equals_pytorch_in_value_and_gradients(eps, rows, bias):
    torch.manual_seed(0)
    layer = torch.nn.Linear(12, 37, bias=bias)
    hidden = (3 * torch.randn(70, 12)).requires_grad_()          # 70 rows: slices do not divide it evenly
    targets = torch.randint(0, 37, (70,))
    scale = 0.37                                                 # any gradient from above is passed on
    expected = _loss_and_grads(lambda: F.cross_entropy(layer(hidden), targets, reduction="sum",
                                                       label_smoothing=eps), hidden, layer, scale)
    ours = _loss_and_grads(lambda: linear_cross_entropy(hidden, layer, targets, label_smoothing=eps, rows=rows),
                           hidden, layer, scale)
    for a, b in zip(ours, expected):
        if b is None:
            assert a is None
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_linear_cross_entropy_passes_gradcheck_and_skips_gradients_without_autograd():
    torch.manual_seed(1)
    layer = torch.nn.Linear(5, 9).double()
    hidden = torch.randn(11, 5, dtype=torch.double, requires_grad=True)
    targets = torch.randint(0, 9, (11,))
    assert torch.autograd.gradcheck(lambda h, w, b: training._LinearCrossEntropy.apply(h, w, b, targets, 0.1, 4),
                                    (hidden, layer.weight, layer.bias))
    with torch.no_grad():
        value = linear_cross_entropy(hidden, layer, targets, label_smoothing=0.1, rows=4)
    assert value.grad_fn is None
    torch.testing.assert_close(value, F.cross_entropy(layer(hidden), targets, reduction="sum",
                                                      label_smoothing=0.1).detach())
    empty = linear_cross_entropy(hidden[:0], layer, targets[:0])
    empty.backward()
    assert empty.item() == 0.0 and not layer.weight.grad.any()


@pytest.mark.parametrize("change, message", [
    (dict(hidden=torch.zeros(4, 6)), "hidden must be"),
    (dict(hidden=torch.zeros(4)), "hidden must be"),
    (dict(targets=torch.zeros(3, dtype=torch.long)), "targets must be a long tensor"),
    (dict(targets=torch.zeros(4)), "targets must be a long tensor"),
    (dict(targets=torch.tensor([0, 1, 2, 9])), r"ids in \[0, 9\)"),
    (dict(targets=torch.tensor([0, -1, 2, 3])), r"ids in \[0, 9\)"),
    (dict(label_smoothing=1.0), "label_smoothing"),
    (dict(rows=0), "rows must be"),
])
def test_linear_cross_entropy_rejects_bad_input_clearly(change, message):
    args = dict(hidden=torch.zeros(4, 5), targets=torch.tensor([0, 1, 2, 8]), label_smoothing=0.0, rows=2)
    args.update(change)
    with pytest.raises(ValueError, match=message):
        linear_cross_entropy(args["hidden"], torch.nn.Linear(5, 9), args["targets"],
                             label_smoothing=args["label_smoothing"], rows=args["rows"])


def test_train_settings_reject_bad_values():
    for bad in [dict(epochs=0), dict(max_tokens=0), dict(label_smoothing=1.0), dict(max_steps=0),
                dict(checkpoint_every=-1)]:
        with pytest.raises(ValueError):
            TrainSettings(**bad)


def test_corpus_reads_any_tsv_ignoring_extra_columns_and_keeps_raw_references(de_corpus):
    corpus = ParallelCorpus(de_corpus, min_freq=1, valid_frac=0.1, test_frac=0.1)
    n = len(german_lines())
    assert sum(map(len, corpus.splits)) == n
    assert "hund" in corpus.tgt_vocab and "cc-by" not in corpus.tgt_vocab   # third column ignored
    assert corpus.settings["french_spacing"] is False                       # German: "nicht müde!"
    src, tgt = corpus.splits.test[0]
    assert tgt.islower() and any(r[0].isupper() for r in corpus.raw_refs[src])
    assert ParallelCorpus.from_settings(corpus.settings).splits == corpus.splits


def test_corpus_path_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        ParallelCorpus(tmp_path / "none.tsv")
    with pytest.raises(FileNotFoundError, match="folder without"):
        ParallelCorpus(tmp_path)
    bad = tmp_path / "bad.tsv"
    bad.write_text("hello\tbonjour\nno tab here\n")
    with pytest.raises(ValueError, match="line 2"):
        ParallelCorpus(bad)


def test_french_spacing_and_detokenize():
    assert french_spacing(["Va !", "Qui ?", "Cours !"]) and not french_spacing(["Geh!", "Wer?", "Lauf!"])
    assert detokenize("je suis là , non ?", french=True) == "je suis là, non ?"
    assert detokenize(["wer", "ist", "da", "?"], french=False) == "wer ist da?"
    assert detokenize("il est parti .") == "il est parti."


def weights(model):
    return [p.detach().clone() for p in model.parameters()]


def test_gradient_accumulation_equals_one_big_batch(de_corpus):
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    runs = []
    for max_tokens in (40, 4000):      # many micro-batches accumulated vs the whole split in one batch
        model = tiny_model(corpus, dropout=0.0)
        settings = TrainSettings(epochs=1, max_tokens=max_tokens, tokens_per_update=10**6, warmup=1, clip=None,
                                 checkpoint_every=0)
        # Plain SGD: the step is the gradient times the rate (Adam's first step is about sign(g),
        # which would blow float round-off on near-zero gradients up to full steps).
        progress = fit(model, corpus, settings, optimizer=torch.optim.SGD(model.parameters(), lr=1.0),
                       report="none")
        assert progress["step"] == 1
        runs.append(weights(model))
    before = weights(tiny_model(corpus, dropout=0.0))
    assert any(not torch.equal(a, b) for a, b in zip(runs[0], before))
    for a, b in zip(*runs):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_resumed_training_takes_the_same_steps_bit_for_bit(de_corpus, tmp_path):
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    base = dict(epochs=3, max_tokens=60, tokens_per_update=100, warmup=3, checkpoint_every=0)
    straight = tiny_model(corpus)
    fit(straight, corpus, TrainSettings(max_steps=9, **base), report="none")

    path = tmp_path / "run.pt"
    first = tiny_model(corpus)
    fit(first, corpus, TrainSettings(max_steps=4, **base), checkpoint=path, save_kwargs={"data": corpus.settings},
        report="none")
    ckpt = load_checkpoint(path)
    assert ckpt.payload["progress"]["step"] == 4 and ckpt.payload["progress"]["batch"] > 0   # mid-epoch
    optimizer = training.paper_adam(ckpt.model.parameters())
    optimizer.load_state_dict(ckpt.payload["optimizer"])
    torch.manual_seed(12345)                      # whatever the global RNG holds now must not matter
    resumed = fit(ckpt.model, corpus, TrainSettings(max_steps=9, **base), optimizer=optimizer,
                  progress=ckpt.payload["progress"], report="none")
    assert resumed["step"] == 9 and len(resumed["history"]["lr"]) == 9
    for a, b in zip(weights(straight), weights(ckpt.model)):
        assert torch.equal(a, b)


def saved(tmp_path, de_corpus, name="m.pt"):
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    model = tiny_model(corpus)
    return save_checkpoint(tmp_path / name, model, corpus.src_vocab, corpus.tgt_vocab, data=corpus.settings), model


def test_checkpoint_round_trip_keeps_weights_vocabularies_and_settings(tmp_path, de_corpus):
    path, model = saved(tmp_path, de_corpus)
    ckpt = load_checkpoint(path)
    for a, b in zip(model.state_dict().values(), ckpt.model.state_dict().values()):
        assert torch.equal(a, b)
    assert ckpt.payload["preprocess"]["lowercase"] is True and ckpt.payload["data"]["path"] == str(de_corpus)
    assert ckpt.tgt_vocab.idx_to_token[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"] and not ckpt.model.training


def test_truncated_garbage_and_foreign_checkpoints_give_clear_errors(tmp_path, de_corpus):
    path, _ = saved(tmp_path, de_corpus)
    data = path.read_bytes()
    cases = {"truncated": data[: len(data) // 2], "garbage": b"not a checkpoint at all", "empty": b""}
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
    """Not a tensor or a plain container: safe loading must refuse to rebuild it."""


def test_loading_is_safe_and_mismatches_are_caught(tmp_path, de_corpus):
    path, _ = saved(tmp_path, de_corpus)
    payload = torch.load(path, weights_only=True)
    torch.save(dict(payload, extra=Payload()), tmp_path / "code.pt")
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_checkpoint(tmp_path / "code.pt")
    torch.save(dict(payload, tgt_vocab=payload["tgt_vocab"][:-1]), tmp_path / "vocab.pt")
    with pytest.raises(CheckpointError, match="do not match"):
        load_checkpoint(tmp_path / "vocab.pt")
    torch.save(dict(payload, config=dict(payload["config"], d_ff=48)), tmp_path / "shape.pt")
    with pytest.raises(CheckpointError, match="do not fit"):
        load_checkpoint(tmp_path / "shape.pt")


def test_save_is_atomic_a_failed_save_keeps_the_old_file(tmp_path, de_corpus, monkeypatch):
    path, model = saved(tmp_path, de_corpus)
    before = path.read_bytes()

    def broken_save(obj, f):
        Path(f).write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(training.torch, "save", broken_save)
    ckpt = load_checkpoint(path)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, model, ckpt.src_vocab, ckpt.tgt_vocab, data={})
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["deu.txt", "m.pt"]


def cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "nmt_lib", *map(str, args)], input=stdin, capture_output=True,
                          text=True, cwd=ROOT, timeout=300)


def test_cli_trains_translates_and_evaluates_english_german(tmp_path, de_corpus):
    ckpt = tmp_path / "de.pt"
    out = cli("train", "--data", de_corpus, "--d-model", 16, "--heads", 2, "--d-ff", 32, "--layers", 1,
              "--max-steps", 4, "--max-tokens", 80, "--tokens-per-update", 100, "--warmup", 2, "--min-freq", 1,
              "--out", ckpt, "--progress", "none")
    assert out.returncode == 0, out.stderr
    assert "trained 4 updates" in out.stdout and load_checkpoint(ckpt).step == 4

    out = cli("train", "--data", de_corpus, "--out", ckpt, "--progress", "none")
    assert out.returncode == 1 and "exists; pass --resume" in out.stderr
    out = cli("train", "--out", ckpt, "--resume", "--max-steps", 6, "--progress", "none")
    assert out.returncode == 0, out.stderr
    assert "resuming" in out.stderr and load_checkpoint(ckpt).step == 6

    lines = "I am tired.\n\nWe have a dog.\nYou see the cat?\n"
    out = cli("translate", "--checkpoint", ckpt, "--beam", 2, stdin=lines)
    assert out.returncode == 0, out.stderr
    translations = out.stdout.split("\n")[:-1]
    # One line out per line in, in order; an empty line stays empty. (After 6 updates the model may
    # well answer <eos> at once, so the other lines may be empty too: their content is not checked.)
    assert len(translations) == 4 and translations[1] == ""
    out = cli("translate", "--checkpoint", ckpt, "--tokenized", stdin="I am tired.\n" * 3)
    assert out.returncode == 0 and len(set(out.stdout.split("\n")[:-1])) == 1 and out.stdout.count("\n") == 3

    out = cli("evaluate", "--checkpoint", ckpt)
    assert out.returncode == 0, out.stderr
    assert "signature: nrefs:" in out.stdout and "case:lc" in out.stdout and "tok:13a" in out.stdout
    score = float(out.stdout.split("BLEU = ")[1].split()[0])
    assert 0 <= score <= 100


@pytest.mark.parametrize("args, status, message", [
    ((), 2, "usage:"),
    (("fly",), 2, "invalid choice"),
    (("translate",), 2, "--checkpoint"),
    (("translate", "--checkpoint", "x.pt", "--beam", "0"), 2, "must be positive"),
    (("train", "--out", "x.pt", "--label-smoothing", "1.5"), 2, "must be in [0, 1)"),
    (("evaluate", "--checkpoint", "/nonexistent/x.pt"), 1, "not found"),
])
def test_cli_bad_arguments_exit_nonzero_with_a_message(args, status, message, capsys):
    try:
        code = training.main(list(args))
    except SystemExit as e:           # argparse's way out: usage message, status 2
        code = e.code
    assert code == status and message in capsys.readouterr().err


def test_python_dash_m_entry_point_reports_usage_errors():
    out = cli("translate", "--beam", "2")
    assert out.returncode == 2 and out.stderr.startswith("usage: python -m nmt_lib translate")


def test_fit_draws_a_bar_with_step_and_rate_or_prints_epoch_lines(de_corpus, capsys):
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    settings = TrainSettings(epochs=1, max_tokens=60, tokens_per_update=100, warmup=3, checkpoint_every=0)
    fit(tiny_model(corpus), corpus, settings, report="bar")
    err = capsys.readouterr().err
    assert "\repoch 1/1 [" in err and " lr " in err and "tok/s" in err and "epoch 1/1: step" in err
    fit(tiny_model(corpus), corpus, settings, report="lines")
    err = capsys.readouterr().err
    assert "[" not in err and "epoch 1/1: step" in err
