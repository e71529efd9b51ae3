"""A published model (`nmt_lib.run.published`): safetensors weights, JSON settings, the
SentencePiece model's file, no pickle, the same checks as a checkpoint, and the command
line's `--model`."""

import json
from pathlib import Path

import pytest
import torch

from conftest import cli_call, cli_run, save_model, write_corpus
from nmt_lib.run import published
from nmt_lib.run.checkpoint import load_checkpoint, save_checkpoint
from nmt_lib.run.corpus import ParallelCorpus
from nmt_lib.run.inference import translate_lines
from nmt_lib.transformer import Transformer, TransformerConfig

SENTENCES = ["I am tired.", "", "We see a dog?", "You are not cold!"]
SHIPPED = published.MODELS / published.PUBLISHED
needs_shipped = pytest.mark.skipif(
    not SHIPPED.is_dir(), reason="no model has been published with the course yet"
)


def examples() -> dict:
    """The sentences the published model translated when it was published, and how."""
    return json.loads((SHIPPED / "examples.json").read_text(encoding="utf-8"))


@pytest.fixture
def subword_checkpoint(tmp_path):
    """A small cased subword model with tied embeddings (one tensor under three names),
    saved."""
    kinds = dict(tokenizer="bpe", vocab_size=400, shared_vocab=True, preprocess="raw")
    corpus = ParallelCorpus(write_corpus(tmp_path), **kinds)
    torch.manual_seed(0)
    sizes = dict(d_model=16, n_heads=2, d_ff=32, n_layers=1, tie_embeddings=True)
    config = TransformerConfig(len(corpus.src_vocab), len(corpus.tgt_vocab), **sizes)
    return save_model(tmp_path / "m.pt", Transformer(config), corpus)


def test_an_exported_model_loads_without_pickle_and_translates_as_its_checkpoint(
    subword_checkpoint, tmp_path, monkeypatch
):
    from safetensors.torch import load_file

    folder = published.export_model(
        subword_checkpoint, tmp_path / "pub", card="# A test model\n"
    )
    files = ["README.md", "model.safetensors", "settings.json", "tokenizer.model"]
    assert sorted(p.name for p in folder.iterdir()) == files
    # no machine's path
    assert "path" not in json.loads((folder / "settings.json").read_text())["data"]
    ckpt = load_checkpoint(subword_checkpoint, device="cpu")
    # the tied matrix is stored once
    stored = load_file(folder / "model.safetensors")
    assert len(stored) + 2 == len(ckpt.model.state_dict())
    sessions = [dict(from_update=0, to_update=7, seconds=1.5, machine="a CPU")]
    progress = {"step": 7, "seconds": 1.5, "sessions": sessions}
    trained = resave(tmp_path / "t.pt", ckpt.model, ckpt, progress=progress)
    # how it was trained
    training = published.load_published(
        published.export_model(trained, tmp_path / "t", card=""), device="cpu"
    ).payload["training"]
    assert training == dict(updates=7, seconds=1.5, sessions=sessions, averaged=None)
    no_pickle = lambda *a, **k: pytest.fail(
        "a published model must load without pickle"
    )
    monkeypatch.setattr(torch, "load", no_pickle)
    pub = published.load_published(folder, device="cpu")
    for (name, a), b in zip(
        ckpt.model.state_dict().items(), pub.model.state_dict().values()
    ):
        assert torch.equal(a.half().float(), b), name  # half precision, nothing else
    assert pub.model.cfg == ckpt.model.cfg
    assert pub.tgt_vocab.idx_to_token == ckpt.tgt_vocab.idx_to_token
    with torch.no_grad():  # the checkpoint's model, rounded the same way
        for t in ckpt.model.state_dict().values():
            t.copy_(t.half().float())
    assert translate_lines(pub, SENTENCES) == translate_lines(ckpt, SENTENCES)
    by_folder = published.load_model(model=str(folder), device="cpu")
    assert by_folder.model.cfg == pub.model.cfg
    # case kept
    assert (
        pub.prepare("I  am\u00a0tired.") == "I am tired."
        and ckpt.prepare is pub.prepare
    )


def resave(path, model, ckpt, **kw) -> Path:
    """`model` saved with `ckpt`'s vocabularies and data settings."""
    vocabs, data = (ckpt.src_vocab, ckpt.tgt_vocab), ckpt.payload["data"]
    return save_checkpoint(path, model, *vocabs, data=data, **kw)


def test_a_checkpoint_and_a_published_model_say_which_model_they_are(
    subword_checkpoint, tmp_path
):
    """Chapter 12's parts travel with the weights: a modern model comes back modern, not
    as chapter 7's."""
    from nmt_lib.modern import GroupedQueryAttention, ModernParts, ModernTransformer
    from nmt_lib.modern import RMSNorm

    ckpt = load_checkpoint(subword_checkpoint, device="cpu")
    today = ModernParts(rms=True, swiglu=True, rope=True, kv_heads=1)
    torch.manual_seed(0)
    model = ModernTransformer(ckpt.model.cfg, today)
    path = resave(tmp_path / "modern.pt", model, ckpt)
    folder = published.export_model(
        path, tmp_path / "pub", card="card\n", dtype=torch.float32
    )
    assert json.loads((folder / "settings.json").read_text())["parts"]["kv_heads"] == 1
    saved = load_checkpoint(path, device="cpu")
    for back in (saved, published.load_published(folder, device="cpu")):
        assert back.model.parts == today
        assert isinstance(back.model.encoder.blocks[0].norm1, RMSNorm)
        cross = back.model.decoder.blocks[0].cross_attn
        assert isinstance(cross, GroupedQueryAttention)
        assert translate_lines(back, SENTENCES) == translate_lines(saved, SENTENCES)
    plain = published.export_model(subword_checkpoint, tmp_path / "p17", card="")
    # chapter 7's model stays it
    assert type(published.load_published(plain, device="cpu").model) is Transformer


@needs_shipped
def test_the_published_model_translates_as_when_it_was_published():
    shown = examples()
    model = published.load_published(device="cpu")
    assert translate_lines(model, shown["sentences"]) == shown["translations"]
    # what the course ships
    assert sum(p.stat().st_size for p in SHIPPED.iterdir()) <= 25 * 2**20
    out = cli_run(
        "translate", "--model", "published", "--device", "cpu", stdin="I am cold.\n"
    )
    cold = shown["translations"][shown["sentences"].index("I am cold.")]
    assert out.returncode == 0 and out.stdout == cold + "\n", out.stderr
    # cased and detokenised
    assert cold[0].isupper() and cold.endswith(".") and " ." not in cold


@needs_shipped
def test_int8_quantises_every_linear_layer_translates_as_well_and_says_so_in_records(
    tmp_path, capsys
):
    import sacrebleu

    from nmt_lib.run.inference import int8

    ckpt = published.load_published(device="cpu")
    sentences = examples()["sentences"]
    fp32, parameters = translate_lines(ckpt, sentences), ckpt.parameters
    int8(ckpt)
    # each replaced by its int8 form
    assert not any(type(m) is torch.nn.Linear for m in ckpt.model.modules())
    quantised = translate_lines(ckpt, sentences)
    assert sacrebleu.corpus_bleu(quantised, [fp32]).score > 50
    record = tmp_path / "r.json"
    args = "evaluate --model published --test tatoeba --limit 10 --int8 --device cpu"
    status, _, err = cli_call(capsys, *args.split(), "--record", record)
    assert status == 0, err
    written = json.loads(record.read_text())["model"]
    assert written["int8"] is True and written["parameters"] == parameters


def test_a_missing_published_model_says_how_to_get_it(tmp_path):
    with pytest.raises(published.CheckpointError, match="install the course"):
        published.load_published(tmp_path / published.PUBLISHED, device="cpu")
