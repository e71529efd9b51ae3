"""The command line and its checkpoints under a course's real risks: over-long input,
full disks, a diverged run, a checkpoint that would run code. Each case names what must
hold: nothing lost, nothing overwritten, one line in and one line out, and a one-line
error otherwise."""

import errno
from pathlib import Path

import pytest
import torch

from conftest import cli_call, german_lines, same_weights, tiny_model, tiny_train_args
from conftest import train_tiny, write_corpus
from nmt_lib.base import cache
from nmt_lib.loop import TrainingDiverged
from nmt_lib.run import cli, trainer
from nmt_lib.run.checkpoint import load_checkpoint
from nmt_lib.run.corpus import ParallelCorpus
from nmt_lib.run.inference import translate_lines


def train(capsys, data, out, *extra):
    """`python -m nmt_lib train` in this process: (exit status, stdout, stderr)."""
    return cli_call(capsys, *tiny_train_args(data, out, *extra))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A checkpoint trained for 3 updates, written by the command line (its path, and
    its corpus)."""
    data = write_corpus(tmp_path_factory.mktemp("trained"))
    out = data.parent / "m.pt"
    args = tiny_train_args(data, out, "--max-steps", 3)
    assert cli.main([str(a) for a in args]) == 0
    return out, data


# ---- 3: an over-long corpus pair is left out, not a run that can never finish


def test_pairs_longer_than_max_len_are_left_out_and_counted(tmp_path, capsys):
    data = tmp_path / "long.txt"
    long = [f"{' '.join(['word'] * (20 + k))}.\tWort {k}.\tCC-BY" for k in range(12)]
    data.write_text("\n".join(german_lines() + long) + "\n", encoding="utf-8")
    corpus = ParallelCorpus(data, min_freq=1)
    in_test = sum(s.startswith("word") for s, _ in corpus.splits.test)
    dropped = corpus.drop_longer_than(16)
    assert dropped["train"] + dropped["valid"] == len(long) - in_test
    assert not [s for s, _ in corpus.splits.train + corpus.splits.valid if "word" in s]
    out = tmp_path / "l.pt"
    status, _, err = train(capsys, data, out, "--max-len", 16, "--epochs", 1)
    assert status == 0, err
    one_epoch = load_checkpoint(out).step
    status, _, err = train(capsys, data, out, "--resume", "--epochs", 2)
    assert status == 0 and load_checkpoint(out).step == 2 * one_epoch, err


# ---- 4: an fp16 run resumes exactly, loss scale and all


def test_an_fp16_run_resumes_with_its_loss_scale_bit_for_bit(corpus, tmp_path):
    straight, path = tiny_model(corpus), tmp_path / "h.pt"
    train_tiny(straight, corpus, dict(precision="fp16", max_steps=12))
    half = dict(precision="fp16", max_steps=6)
    train_tiny(tiny_model(corpus), corpus, half, checkpoint=path)
    ckpt = load_checkpoint(path)
    # overflowing updates were skipped: the scale fell
    assert ckpt.payload["scaler"]["scale"] < 2.0**16
    assert ckpt.payload["progress"]["cuda_rng"] is None  # saved on a GPU; none here
    all_of_it = dict(precision="fp16", max_steps=12)
    train_tiny(ckpt.model, corpus, all_of_it, resume=ckpt.payload)
    assert same_weights(straight, ckpt.model)


# ---- 5, 6: a failed write or a diverged model never replaces a good checkpoint


def test_a_full_disk_is_one_line_and_the_previous_checkpoint_is_kept(
    trained, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "m.pt"
    out.write_bytes(trained[0].read_bytes())
    before = out.read_bytes()

    def full(obj, f):
        Path(f).write_bytes(b"half")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos")

    monkeypatch.setattr(cache.torch, "save", full)
    monkeypatch.setattr(cache, "disk_is_full", lambda folder: True)
    status, _, err = train(capsys, trained[1], out, "--resume", "--max-steps", 5)
    # one line, the last, says why
    assert status == 1 and "Traceback" not in err
    assert "the disk is full" in err.splitlines()[-1]
    assert out.read_bytes() == before and not cache.temporary_files(out)

    def no_space(obj, f):  # a new file: nothing is written
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache.torch, "save", no_space)
    monkeypatch.setattr(cache, "disk_is_full", lambda folder: False)
    with pytest.raises(cache.SaveError, match="the disk is full"):
        cache.atomic_save({"x": 1}, tmp_path / "new" / "new.pt")
    assert list((tmp_path / "new").iterdir()) == []


def test_a_diverged_run_says_so_and_saves_nothing(trained, tmp_path, capsys):
    out = tmp_path / "nan.pt"
    status, _, err = train(
        capsys, trained[1], out, "--lr-factor", "1e30", "--max-steps", 3
    )
    assert status == 1 and "lower lr_factor" in err and not out.exists()


def test_weights_that_diverge_after_a_checkpoint_leave_it_as_it_was(
    corpus, tmp_path, monkeypatch
):
    original = trainer.Run.after_update

    def after_update(run):
        if run.progress["step"] == 4:  # the weights go bad just before the second save
            next(run.model.parameters()).data.fill_(float("nan"))
        return original(run)

    monkeypatch.setattr(trainer.Run, "after_update", after_update)
    with pytest.raises(TrainingDiverged):
        every_2 = dict(checkpoint_every=2)
        train_tiny(tiny_model(corpus), corpus, every_2, checkpoint=tmp_path / "m.pt")
    assert load_checkpoint(tmp_path / "m.pt").payload["progress"]["step"] == 2


# ---- 10, 11: one line out per line in


def test_an_over_long_line_is_cut_and_named_and_the_others_translated(
    trained, tmp_path
):
    payload = torch.load(trained[0], weights_only=True)
    short = dict(payload, config=dict(payload["config"], max_len=12))
    torch.save(short, tmp_path / "short.pt")
    lines = [
        "\ufeffI am tired.",
        "I am " + "very " * 40 + "tired.",
        "",
        "We see a car.",
    ]
    said = []
    out = translate_lines(
        load_checkpoint(tmp_path / "short.pt"), lines, first=11, warn=said.append
    )
    assert len(out) == 4 and out[2] == ""
    assert len(said) == 1 and said[0].startswith("line 12 ")  # the input's own number


# ---- 17: the lessons' functions answer right or raise, never a wrong answer silently


def test_decoding_and_bleu_refuse_what_they_would_answer_wrongly(trained):
    from nmt_lib.decoding import beam_search, greedy_decode
    from nmt_lib.metrics import corpus_bleu, sentence_bleu

    ckpt = load_checkpoint(trained[0])
    # BLEU of characters otherwise
    with pytest.raises(ValueError, match="token lists"):
        corpus_bleu(["je suis là"], [["je suis là"]])
    with pytest.raises(ValueError, match="token lists"):
        sentence_bleu("je suis là", "je suis là")
    empty = torch.zeros(0, 3, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    ids = dict(bos_id=ckpt.tgt_vocab.bos_id, eos_id=ckpt.tgt_vocab.eos_id)
    assert beam_search(ckpt.model, *empty, **ids).tokens == []
    assert greedy_decode(ckpt.model, *empty, **ids).tokens == []


def test_a_tiny_temperature_samples_the_most_likely_token():
    from nmt_lib.lm import DecoderOnlyLM, LMConfig, generate

    torch.manual_seed(0)
    model = DecoderOnlyLM(
        LMConfig(vocab_size=30, d_model=16, n_heads=2, d_ff=32, n_layers=1, context=16)
    )
    prompt = [1, 2, 3]
    assert generate(model, prompt, 6, temperature=1e-45) == generate(
        model, prompt, 6, greedy=True
    )
