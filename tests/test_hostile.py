"""The command line and its checkpoints under a course's real risks: absurd sizes, over-long and endless
input, full disks and closed outputs, a checkpoint that would run code. Each case names what must hold:
nothing lost, nothing overwritten, memory bounded, one line in and one line out, and a one-line error
otherwise."""
import errno
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import cli_call, german_lines
from nmt_lib.base import cache
from nmt_lib.run import checkpoint, cli, guards
from nmt_lib.run.checkpoint import CheckpointError, load_checkpoint
from nmt_lib.run.corpus import ParallelCorpus
from nmt_lib.run.inference import input_batches, one_line, translate_lines
from nmt_lib.run.trainer import RunSettings, train_run
from nmt_lib.transformer import Transformer, TransformerConfig

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--d-model", "16", "--heads", "2", "--d-ff", "32", "--layers", "1", "--max-tokens", "80",
        "--tokens-per-update", "100", "--warmup", "2", "--min-freq", "1", "--progress", "none"]


def train(capsys, data, out, *extra):
    """`python -m nmt_lib train` in this process: (exit status, stdout, stderr)."""
    return cli_call(capsys, "train", "--data", data, *TINY, "--out", out, *extra)


def cli_run(*args, stdin=None, **kw):
    return subprocess.run([sys.executable, "-m", "nmt_lib", *map(str, args)], input=stdin, capture_output=True,
                          text=True, cwd=ROOT, timeout=300, **kw)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A checkpoint trained for 3 updates, written by the command line (its path, and its corpus)."""
    folder = tmp_path_factory.mktemp("trained")
    data = folder / "deu.txt"
    data.write_text("\n".join(german_lines()) + "\n", encoding="utf-8")
    out = folder / "m.pt"
    assert cli.main(["train", "--data", str(data), *TINY, "--out", str(out), "--max-steps", "3"]) == 0
    return out, data


def payload_of(path):
    return torch.load(path, weights_only=True)


# ---- 1, 2, 16: files are never followed, overwritten or deleted by mistake -----------------------------

def test_a_symlinked_out_is_locked_and_written_at_its_target(tmp_path, de_corpus, capsys):
    (tmp_path / "real").mkdir()
    target, link = tmp_path / "real" / "t.pt", tmp_path / "link.pt"
    link.symlink_to(target)
    with guards.run_lock(target):                 # a run on the target itself holds the lock
        status, _, err = train(capsys, de_corpus, link, "--max-steps", 1)
    assert status == 1 and "being trained by another run" in err
    status, _, err = train(capsys, de_corpus, link, "--max-steps", 1)
    assert status == 0, err
    assert link.is_symlink() and target.is_file() and load_checkpoint(link).step == 1


def test_a_folder_or_a_device_as_out_is_refused_before_anything_is_made(tmp_path, de_corpus, capsys):
    status, _, err = train(capsys, de_corpus, f"{tmp_path / 'dir'}/", "--max-steps", 1)
    assert status == 1 and "ends with a slash" in err and not (tmp_path / "dir").exists()
    status, _, err = train(capsys, de_corpus, "/dev/null", "--max-steps", 1)
    assert status == 1 and "not a regular file" in err and not Path("/dev/.null.lock").exists()


def test_taking_over_a_lock_removes_only_that_checkpoints_temporaries(tmp_path):
    mine = [tmp_path / ".run.pt.abcd_123.tmp"]
    others = [tmp_path / ".run.pt.bak._ttxwlja.tmp", tmp_path / ".run.pt.x.abcdefgh.tmp"]
    for f in mine + others:
        f.write_bytes(b"half")
    assert cache.temporary_files(tmp_path / "run.pt") == mine
    with guards.run_lock(tmp_path / "run.pt"):
        pass
    assert [f.exists() for f in mine + others] == [False, True, True]


# ---- 3: an over-long corpus pair is left out, not a run that can never finish -------------------------

def test_pairs_longer_than_max_len_are_left_out_and_counted(tmp_path, capsys):
    data = tmp_path / "long.txt"
    long = ["\t".join([" ".join(["word"] * (20 + k)) + ".", f"Wort {k}.", "CC-BY"]) for k in range(12)]
    data.write_text("\n".join(german_lines() + long) + "\n", encoding="utf-8")
    status, out, err = train(capsys, data, tmp_path / "l.pt", "--max-len", 16, "--epochs", 1)
    assert status == 0, err
    assert "left out" in err and "longer than the model's 16 positions" in err
    assert "trained" in out
    status, _, err = train(capsys, data, tmp_path / "l.pt", "--resume", "--epochs", 2)
    assert status == 0, err


# ---- 4: an fp16 run resumes exactly, loss scale and all ------------------------------------------------

def test_an_fp16_run_resumes_with_its_loss_scale_bit_for_bit(de_corpus, tmp_path):
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    base = dict(epochs=3, max_tokens=60, tokens_per_update=100, warmup=3, checkpoint_every=0, precision="fp16")

    def model():
        torch.manual_seed(3)
        return Transformer(TransformerConfig(len(corpus.src_vocab), len(corpus.tgt_vocab), d_model=16, n_heads=2,
                                             d_ff=32, n_layers=1, max_len=32))

    straight = model()
    train_run(straight, corpus, RunSettings(max_steps=12, **base), report="none")
    path = tmp_path / "h.pt"
    train_run(model(), corpus, RunSettings(max_steps=6, **base), checkpoint=path,
             save_kwargs={"data": corpus.settings}, report="none")
    ckpt = load_checkpoint(path)
    assert ckpt.payload["scaler"]["scale"] < 2.0 ** 16     # overflowing updates were skipped: the scale fell
    assert ckpt.payload["progress"]["cuda_rng"] is None      # saved on a GPU; none here
    train_run(ckpt.model, corpus, RunSettings(max_steps=12, **base), resume=ckpt.payload, report="none")
    for a, b in zip(straight.parameters(), ckpt.model.parameters()):
        assert torch.equal(a, b)


# ---- 5, 6: a failed write or a diverged model never replaces a good checkpoint -------------------------

def test_a_full_disk_is_one_line_and_the_previous_checkpoint_is_kept(trained, tmp_path, capsys, monkeypatch):
    out = tmp_path / "m.pt"
    out.write_bytes(trained[0].read_bytes())
    before = out.read_bytes()

    def full(obj, f):
        Path(f).write_bytes(b"half")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")

    monkeypatch.setattr(cache.torch, "save", full)
    monkeypatch.setattr(cache, "disk_is_full", lambda folder: True)
    status, _, err = train(capsys, trained[1], out, "--resume", "--max-steps", 5)
    assert status == 1 and "could not write" in err and "the disk is full; the previous one is kept" in err
    assert "Traceback" not in err and err.splitlines()[-1].startswith("python -m nmt_lib train: error: could not")
    assert out.read_bytes() == before and not cache.temporary_files(out)


def test_a_write_that_runs_out_of_space_says_the_disk_is_full(trained, tmp_path, monkeypatch):
    def no_space(obj, f):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache.torch, "save", no_space)
    with pytest.raises(cache.SaveError, match="the disk is full; nothing was written"):
        cache.atomic_save({"x": 1}, tmp_path / "new.pt")
    assert list(tmp_path.iterdir()) == []


def test_a_diverged_run_says_so_and_saves_nothing(trained, tmp_path, capsys):
    out = tmp_path / "nan.pt"
    status, _, err = train(capsys, trained[1], out, "--lr-factor", "1e30", "--max-steps", 1)
    assert status == 1 and "NaN or infinite" in err and "no checkpoint was written" in err and not out.exists()


# ---- 7, 8, 9: memory is bounded whatever the sizes -----------------------------------------------------

def test_a_crafted_huge_config_is_refused_before_any_model_is_built(trained, tmp_path, monkeypatch):
    payload = payload_of(trained[0])
    torch.save(dict(payload, config=dict(payload["config"], d_model=4096, n_layers=500)), tmp_path / "deep.pt")
    built = []
    monkeypatch.setattr(checkpoint, "Transformer", lambda cfg: built.append(cfg))
    with pytest.raises(CheckpointError, match="parameters and need about .* GB to load"):
        load_checkpoint(tmp_path / "deep.pt")
    assert built == []


def test_a_narrow_model_with_millions_of_layers_is_refused_before_it_is_built(trained, tmp_path, monkeypatch):
    payload = payload_of(trained[0])
    narrow = dict(payload["config"], d_model=2, n_heads=1, d_ff=1, n_layers=9_000_000)   # under 1e9 parameters
    torch.save(dict(payload, config=narrow), tmp_path / "narrow.pt")
    built = []
    monkeypatch.setattr(checkpoint, "Transformer", lambda cfg: built.append(cfg))
    with pytest.raises(CheckpointError, match="9,000,000 layers; the course's tools stop at 1,000"):
        load_checkpoint(tmp_path / "narrow.pt")
    assert built == []


def test_translate_buffers_a_bounded_number_of_lines(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["translate", "--checkpoint", "m.pt", "--batch-size", "1000000000"])
    assert e.value.code == 2 and "must be at most 4,096" in capsys.readouterr().err


@pytest.mark.parametrize("options, message", [
    (["--d-model", "1000000"], "parameters and need about"),
    (["--d-ff", "99999999999999999999"], "the course's tools stop at 1,000,000,000 parameters"),
    (["--layers", "1000000"], "stop at 1,000"), (["--threads", "100000"], "use at most"),
    (["--d-model", "2", "--heads", "1", "--d-ff", "1", "--layers", "1000000"], "1,000,000 layers")])
def test_absurd_sizes_are_one_line_errors_before_anything_is_read(options, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "--data", str(tmp_path / "absent.txt"), "--out", str(tmp_path / "m.pt"), *options])
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


# ---- 10, 11, 13: translate streams, one line out per line in, always -----------------------------------

def test_translate_answers_each_line_as_it_arrives(trained):
    child = subprocess.Popen([sys.executable, "-m", "nmt_lib", "translate", "--checkpoint", str(trained[0])],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        for sentence in (b"I am tired.\n", b"We have a dog.\n"):
            child.stdin.write(sentence)
            child.stdin.flush()
            ready = select.select([child.stdout], [], [], 120)[0]       # stdin stays open: no end of input yet
            assert ready, "no translation before the end of the input"
            child.stdout.readline()
    finally:
        child.kill()
        child.wait()


def test_input_batches_go_out_when_full_or_when_nothing_more_waits():
    read, write = os.pipe()
    os.write(write, b"one\r\ntwo\n" + b"x" * 5000 + b"\nthree")
    os.close(write)
    warned = []
    with os.fdopen(read, "rb") as stream:
        batches = list(input_batches(stream, 2, warn=warned.append, max_bytes=1000))
    assert batches == [["one\r", "two"], ["x" * 1000, "three"]]
    assert warned == ["line 3 is longer than 1,000 bytes: only its first 1,000 were read"]


def test_an_over_long_line_is_cut_and_named_and_the_others_translated(trained, tmp_path):
    payload = payload_of(trained[0])
    torch.save(dict(payload, config=dict(payload["config"], max_len=12)), tmp_path / "short.pt")
    ckpt = load_checkpoint(tmp_path / "short.pt")
    said = []
    out = translate_lines(ckpt, ["\ufeffI am tired.", "I am " + "very " * 40 + "tired.", "", "We see a car."],
                          first=11, warn=said.append)
    assert len(out) == 4 and out[2] == ""
    assert said == ["line 12 has 44 tokens, more than the model's 11: only its first 11 were translated"]


def test_whatever_the_model_writes_comes_out_as_one_line():
    assert one_line("je\nsuis\r\x85 fatigué\u2028.\x7f\x00") == "je suis fatigué ."


def test_a_model_that_writes_line_breaks_still_gives_one_line_per_input(trained, tmp_path):
    payload = payload_of(trained[0])
    tgt = list(payload["tgt_vocab"])
    tgt[-1] = "a\nb"                                    # a crafted token, which the model is made to write
    torch.save(dict(forced(payload, len(tgt) - 1), tgt_vocab=tgt), tmp_path / "nl.pt")
    out = cli_run("translate", "--checkpoint", tmp_path / "nl.pt", stdin="I am tired.\nWe see a car.\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("\n") == 2 and "a b" in out.stdout


# ---- 12, 14, 16: checkpoints that cannot be used are one-line errors ------------------------------------

def test_evaluate_without_the_corpus_path_says_so(trained, tmp_path):
    payload = payload_of(trained[0])
    torch.save(dict(payload, data={}), tmp_path / "d.pt")
    out = cli_run("evaluate", "--checkpoint", tmp_path / "d.pt")
    assert out.returncode == 1 and "does not say which corpus" in out.stderr and "Traceback" not in out.stderr


class Payload:
    """Unpickled, it would call os.system (with a harmless command)."""

    def __reduce__(self):
        return os.system, ("true",)


def test_a_pickle_that_could_run_code_is_not_a_safe_checkpoint(tmp_path):
    torch.save({"format": checkpoint.CHECKPOINT_FORMAT, "x": Payload()}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="is not a safe checkpoint"):
        load_checkpoint(tmp_path / "evil.pt")


def test_the_final_line_says_which_weights_the_validation_loss_is_of(trained, tmp_path, capsys):
    out = tmp_path / "v.pt"
    status, printed, _ = train(capsys, trained[1], out, "--epochs", 1)
    assert status == 0 and "valid loss" in printed and "not validated" not in printed
    status, printed, _ = train(capsys, trained[1], out, "--resume", "--epochs", 3, "--max-steps",
                               load_checkpoint(out).step + 1)
    assert status == 0 and "at the end of epoch 1" in printed and "the final weights were not validated" in printed


def forced(payload, token_id: int) -> dict:
    """The payload with the output layer's bias set so that the model writes `token_id` at every step."""
    state = dict(payload["state_dict"])
    bias = torch.full_like(state["decoder.dense.bias"], -1e4)
    bias[token_id] = 1e4
    return dict(payload, state_dict={**state, "decoder.dense.bias": bias})


def test_tokenized_output_is_the_models_pieces(trained, tmp_path):
    payload = payload_of(trained[0])
    torch.save(forced(payload, 5), tmp_path / "f.pt")
    ckpt = load_checkpoint(tmp_path / "f.pt")

    class Pieces(type(ckpt.tgt_vocab)):                 # a tokenizer whose text differs from its pieces
        def detokenize(self, tokens):
            return "".join(tokens)

    ckpt.tgt_vocab.__class__ = Pieces
    token = ckpt.tgt_vocab.idx_to_token[5]
    assert translate_lines(ckpt, ["I am tired."], max_len=3)[0] == token * 3
    assert translate_lines(ckpt, ["I am tired."], max_len=3, tokenized=True)[0] == " ".join([token] * 3)


# ---- 15: closed or full outputs, and signals ------------------------------------------------------------

def test_a_full_or_closed_standard_output_is_a_one_line_error(trained):
    for redirect in ("> /dev/full", ">&-"):
        out = subprocess.run(f"echo 'I am tired.' | {sys.executable} -m nmt_lib translate --checkpoint "
                             f"{trained[0]} {redirect}", shell=True, capture_output=True, text=True, cwd=ROOT,
                             timeout=300)
        assert out.returncode == 1 and out.stderr.count("\n") == 1 and "standard output" in out.stderr, out.stderr


def test_sighup_stops_training_with_a_checkpoint(trained, tmp_path):
    out = tmp_path / "hup.pt"
    child = subprocess.Popen([sys.executable, "-m", "nmt_lib", "train", "--data", str(trained[1]), *TINY, "--out",
                              str(out), "--epochs", "100000", "--checkpoint-every", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    deadline = time.time() + 120
    while "Transformer:" not in (line := child.stderr.readline()) and time.time() < deadline:
        assert line, "the run ended before training"
    time.sleep(1)
    child.send_signal(signal.SIGHUP)
    assert child.wait(timeout=120) == 129
    assert load_checkpoint(out).payload["progress"]["stopped"] == "SIGHUP"   # written when it stopped


def test_stdin_closed_translates_nothing(trained):
    out = subprocess.run(f"{sys.executable} -m nmt_lib translate --checkpoint {trained[0]} <&-", shell=True,
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0 and out.stdout == "" and "Traceback" not in out.stderr


# ---- 17: the lessons' functions answer right or raise, never return a wrong answer silently ------------

def test_decoding_and_bleu_refuse_what_they_would_answer_wrongly(trained):
    from nmt_lib.decoding import beam_search, greedy_decode
    from nmt_lib.metrics import corpus_bleu, sentence_bleu

    ckpt = load_checkpoint(trained[0])
    model, tgt_vocab = ckpt.model, ckpt.tgt_vocab
    with pytest.raises(ValueError, match="token lists, not strings"):       # BLEU of characters otherwise
        corpus_bleu(["je suis là"], [["je suis là"]])
    with pytest.raises(ValueError, match="token lists, not strings"):
        sentence_bleu("je suis là", "je suis là")
    empty = torch.zeros(0, 3, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    ids = dict(bos_id=tgt_vocab.bos_id, eos_id=tgt_vocab.eos_id)
    assert beam_search(model, *empty, **ids).tokens == greedy_decode(model, *empty, **ids).tokens == []


def test_attention_views_count_layers_and_heads_from_one(trained):
    from nmt_lib.run.app import draw_attention, explore

    ckpt = load_checkpoint(trained[0])
    with pytest.raises(ValueError, match="max_src_len must be at least 1"):
        explore(ckpt.model, ckpt.src_vocab, ckpt.tgt_vocab, "I am tired.", max_src_len=0)
    exp = explore(ckpt.model, ckpt.src_vocab, ckpt.tgt_vocab, "I am tired.", max_len=3)
    for bad in (dict(layer=0), dict(layer=2), dict(head=0), dict(head=3)):
        with pytest.raises(ValueError, match="counted from 1"):
            draw_attention(exp, **bad)


def test_a_tiny_temperature_samples_the_most_likely_token():
    from nmt_lib.lm import DecoderOnlyLM, LMConfig, generate

    torch.manual_seed(0)
    model = DecoderOnlyLM(LMConfig(vocab_size=30, d_model=16, n_heads=2, d_ff=32, n_layers=1, context=16))
    prompt = [1, 2, 3]
    assert generate(model, prompt, 6, temperature=1e-45) == generate(model, prompt, 6, greedy=True)
