"""The command line and its checkpoints under a course's real risks: over-long input,
full disks, a diverged run, a checkpoint that would run code. Each case names what must
hold: nothing lost, nothing overwritten, one line in and one line out, and a one-line
error otherwise."""

import errno
from pathlib import Path

import pytest
import torch

from conftest import TINY_ARGS, TINY_RUN, cli_call, german_lines, tiny_model
from nmt_lib.base import cache
from nmt_lib.loop import TrainingDiverged
from nmt_lib.run import cli, trainer
from nmt_lib.run.checkpoint import load_checkpoint
from nmt_lib.run.corpus import ParallelCorpus
from nmt_lib.run.inference import translate_lines
from nmt_lib.run.trainer import RunSettings, train_run


def train(capsys, data, out, *extra):
    """`python -m nmt_lib train` in this process: (exit status, stdout, stderr)."""
    return cli_call(capsys, "train", "--data", data, *TINY_ARGS, "--out", out, *extra)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A checkpoint trained for 3 updates, written by the command line (its path, and
    its corpus)."""
    folder = tmp_path_factory.mktemp("trained")
    data = folder / "deu.txt"
    data.write_text("\n".join(german_lines()) + "\n", encoding="utf-8")
    out = folder / "m.pt"
    assert (
        cli.main(
            [
                "train",
                "--data",
                str(data),
                *TINY_ARGS,
                "--out",
                str(out),
                "--max-steps",
                "3",
            ]
        )
        == 0
    )
    return out, data


def payload_of(path):
    return torch.load(path, weights_only=True)


# ---- 3: an over-long corpus pair is left out, not a run that can never finish
# -------------------------


def test_pairs_longer_than_max_len_are_left_out_and_counted(tmp_path, capsys):
    data = tmp_path / "long.txt"
    long = [
        "\t".join([" ".join(["word"] * (20 + k)) + ".", f"Wort {k}.", "CC-BY"])
        for k in range(12)
    ]
    data.write_text("\n".join(german_lines() + long) + "\n", encoding="utf-8")
    status, out, err = train(
        capsys, data, tmp_path / "l.pt", "--max-len", 16, "--epochs", 1
    )
    assert status == 0, err
    assert "left out" in err and "longer than the model's 16 positions" in err
    assert "trained" in out
    status, _, err = train(capsys, data, tmp_path / "l.pt", "--resume", "--epochs", 2)
    assert status == 0, err


# ---- 4: an fp16 run resumes exactly, loss scale and all
# ------------------------------------------------


def test_an_fp16_run_resumes_with_its_loss_scale_bit_for_bit(de_corpus, tmp_path):
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    base = TINY_RUN | dict(precision="fp16")

    straight = tiny_model(corpus)
    train_run(straight, corpus, RunSettings(max_steps=12, **base), report="none")
    path = tmp_path / "h.pt"
    train_run(
        tiny_model(corpus),
        corpus,
        RunSettings(max_steps=6, **base),
        checkpoint=path,
        save_kwargs={"data": corpus.settings},
        report="none",
    )
    ckpt = load_checkpoint(path)
    # overflowing updates were skipped: the scale fell
    assert ckpt.payload["scaler"]["scale"] < 2.0**16
    assert ckpt.payload["progress"]["cuda_rng"] is None  # saved on a GPU; none here
    train_run(
        ckpt.model,
        corpus,
        RunSettings(max_steps=12, **base),
        resume=ckpt.payload,
        report="none",
    )
    for a, b in zip(straight.parameters(), ckpt.model.parameters()):
        assert torch.equal(a, b)


# ---- 5, 6: a failed write or a diverged model never replaces a good checkpoint
# -------------------------


def test_a_full_disk_is_one_line_and_the_previous_checkpoint_is_kept(
    trained, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "m.pt"
    out.write_bytes(trained[0].read_bytes())
    before = out.read_bytes()

    def full(obj, f):
        Path(f).write_bytes(b"half")
        raise RuntimeError(
            "[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0"
        )

    monkeypatch.setattr(cache.torch, "save", full)
    monkeypatch.setattr(cache, "disk_is_full", lambda folder: True)
    status, _, err = train(capsys, trained[1], out, "--resume", "--max-steps", 5)
    assert (
        status == 1
        and "could not write" in err
        and "the disk is full; the previous one is kept" in err
    )
    assert "Traceback" not in err and err.splitlines()[-1].startswith(
        "python -m nmt_lib train: error: could not"
    )
    assert out.read_bytes() == before and not cache.temporary_files(out)


def test_a_write_that_runs_out_of_space_says_the_disk_is_full(
    trained, tmp_path, monkeypatch
):
    def no_space(obj, f):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache.torch, "save", no_space)
    with pytest.raises(cache.SaveError, match="the disk is full; nothing was written"):
        cache.atomic_save({"x": 1}, tmp_path / "new.pt")
    assert list(tmp_path.iterdir()) == []


def test_a_diverged_run_says_so_and_saves_nothing(trained, tmp_path, capsys):
    out = tmp_path / "nan.pt"
    status, _, err = train(
        capsys, trained[1], out, "--lr-factor", "1e30", "--max-steps", 1
    )
    assert (
        status == 1
        and "NaN or infinite" in err
        and "no checkpoint was written" in err
        and not out.exists()
    )


def test_weights_that_diverge_after_a_checkpoint_leave_it_as_it_was(
    de_corpus, tmp_path, monkeypatch
):
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    model = tiny_model(corpus)
    original = trainer.RunHooks.after_update

    def after_update(hooks, model, optimizer, schedule, progress):
        if progress["step"] == 4:  # the weights go bad just before the second save
            next(model.parameters()).data.fill_(float("nan"))
        return original(hooks, model, optimizer, schedule, progress)

    monkeypatch.setattr(trainer.RunHooks, "after_update", after_update)
    settings = RunSettings(**TINY_RUN | dict(checkpoint_every=2))
    with pytest.raises(
        TrainingDiverged,
        match=r"NaN or infinite values by update 4.*\(update 2\) is unaffected",
    ):
        train_run(
            model,
            corpus,
            settings,
            checkpoint=tmp_path / "m.pt",
            save_kwargs={"data": corpus.settings},
            report="none",
        )
    assert load_checkpoint(tmp_path / "m.pt").payload["progress"]["step"] == 2


# ---- 10, 11: one line out per line in
# ----------------------------------------------------------------


def test_an_over_long_line_is_cut_and_named_and_the_others_translated(
    trained, tmp_path
):
    payload = payload_of(trained[0])
    torch.save(
        dict(payload, config=dict(payload["config"], max_len=12)), tmp_path / "short.pt"
    )
    ckpt = load_checkpoint(tmp_path / "short.pt")
    said = []
    out = translate_lines(
        ckpt,
        ["\ufeffI am tired.", "I am " + "very " * 40 + "tired.", "", "We see a car."],
        first=11,
        warn=said.append,
    )
    assert len(out) == 4 and out[2] == ""
    assert said == [
        "line 12 has 44 tokens, more than the model's 11: only its first 11 were"
        " translated"
    ]


# ---- 17: the lessons' functions answer right or raise, never return a wrong answer
# silently ------------


def test_decoding_and_bleu_refuse_what_they_would_answer_wrongly(trained):
    from nmt_lib.decoding import beam_search, greedy_decode
    from nmt_lib.metrics import corpus_bleu, sentence_bleu

    ckpt = load_checkpoint(trained[0])
    model, tgt_vocab = ckpt.model, ckpt.tgt_vocab
    # BLEU of characters otherwise
    with pytest.raises(ValueError, match="token lists, not strings"):
        corpus_bleu(["je suis là"], [["je suis là"]])
    with pytest.raises(ValueError, match="token lists, not strings"):
        sentence_bleu("je suis là", "je suis là")
    empty = torch.zeros(0, 3, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    ids = dict(bos_id=tgt_vocab.bos_id, eos_id=tgt_vocab.eos_id)
    assert (
        beam_search(model, *empty, **ids).tokens
        == greedy_decode(model, *empty, **ids).tokens
        == []
    )


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
