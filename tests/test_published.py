"""A published model (`nmt_lib.run.published`): safetensors weights, JSON settings, no
pickle, the same checks as a checkpoint, and the command line's `--model`."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import german_lines
from nmt_lib.run import published
from nmt_lib.run.checkpoint import load_checkpoint, save_checkpoint
from nmt_lib.run.corpus import ParallelCorpus
from nmt_lib.run.inference import translate_lines
from nmt_lib.transformer import Parts, Transformer, TransformerConfig

ROOT = Path(__file__).resolve().parent.parent
pub_training = lambda folder: published.load_published(folder, device="cpu").payload[
    "training"
]
SENTENCES = ["I am tired.", "", "We see a dog?", "You are not cold!"]


@pytest.fixture
def subword_checkpoint(tmp_path):
    """A small cased subword model with tied embeddings (one tensor under three names),
    saved."""
    corpus_file = tmp_path / "deu.txt"
    corpus_file.write_text("\n".join(german_lines()) + "\n", encoding="utf-8")
    corpus = ParallelCorpus(
        corpus_file,
        tokenizer="bpe",
        vocab_size=400,
        shared_vocab=True,
        preprocess="raw",
    )
    torch.manual_seed(0)
    model = Transformer(
        TransformerConfig(
            len(corpus.src_vocab),
            len(corpus.tgt_vocab),
            d_model=16,
            n_heads=2,
            d_ff=32,
            n_layers=1,
            tie_embeddings=True,
        )
    )
    return save_checkpoint(
        tmp_path / "m.pt",
        model,
        corpus.src_vocab,
        corpus.tgt_vocab,
        data=corpus.settings,
    )


def test_an_exported_model_loads_without_pickle_and_translates_as_its_checkpoint(
    subword_checkpoint, tmp_path, monkeypatch
):
    folder = published.export_model(
        subword_checkpoint, tmp_path / "pub", card="# A test model\n"
    )
    assert sorted(p.name for p in folder.iterdir()) == [
        "README.md",
        "model.safetensors",
        "settings.json",
    ]
    # no machine's path
    assert "path" not in json.loads((folder / "settings.json").read_text())["data"]
    ckpt = load_checkpoint(subword_checkpoint, device="cpu")
    sessions = [
        {
            "from_update": 0,
            "to_update": 7,
            "seconds": 1.5,
            "machine": "a CPU, 2 threads",
        }
    ]
    trained = save_checkpoint(
        tmp_path / "t.pt",
        ckpt.model,
        ckpt.src_vocab,
        ckpt.tgt_vocab,
        data=ckpt.payload["data"],
        progress={"step": 7, "seconds": 1.5, "sessions": sessions},
    )
    # how it was trained
    assert pub_training(published.export_model(trained, tmp_path / "t", card="")) == {
        "updates": 7,
        "seconds": 1.5,
        "sessions": sessions,
        "averaged": None,
    }
    from safetensors.torch import load_file

    stored, tied = (
        load_file(folder / "model.safetensors"),
        json.loads((folder / "settings.json").read_text())["tied"],
    )
    # the tied matrix is stored once
    assert len(tied) == 2 and set(tied.values()) <= set(stored)
    assert len(stored) + 2 == len(
        load_checkpoint(subword_checkpoint, device="cpu").model.state_dict()
    )
    ckpt = load_checkpoint(subword_checkpoint, device="cpu")
    monkeypatch.setattr(
        torch,
        "load",
        lambda *a, **k: pytest.fail("a published model must load without pickle"),
    )
    pub = published.load_published(folder, device="cpu")
    for (name, a), b in zip(
        ckpt.model.state_dict().items(), pub.model.state_dict().values()
    ):
        assert torch.equal(a.half().float(), b), name  # half precision, nothing else
    assert (
        pub.model.cfg == ckpt.model.cfg
        and pub.tgt_vocab.idx_to_token == ckpt.tgt_vocab.idx_to_token
    )
    with torch.no_grad():  # the checkpoint's model, rounded the same way
        for t in ckpt.model.state_dict().values():
            t.copy_(t.half().float())
    assert translate_lines(pub, SENTENCES) == translate_lines(ckpt, SENTENCES)
    assert (
        published.load_model(model=str(folder), device="cpu").model.cfg == pub.model.cfg
    )
    assert (
        pub.prepare("I  am\u00a0tired.") == "I am tired."
        and ckpt.prepare is pub.prepare
    )  # case kept


def test_a_checkpoint_and_a_published_model_say_which_model_they_are(
    subword_checkpoint, tmp_path
):
    """Chapter 12's parts travel with the weights: a modern model comes back modern, not
    as chapter 7's."""
    from nmt_lib.modern import GroupedQueryAttention, ModernParts, RMSNorm

    ckpt = load_checkpoint(subword_checkpoint, device="cpu")
    today = ModernParts(rms=True, swiglu=True, rope=True, kv_heads=1)
    torch.manual_seed(0)
    model = Transformer(ckpt.model.cfg, today)
    path = save_checkpoint(
        tmp_path / "modern.pt",
        model,
        ckpt.src_vocab,
        ckpt.tgt_vocab,
        data=ckpt.payload["data"],
    )
    folder = published.export_model(
        path, tmp_path / "pub", card="card\n", dtype=torch.float32
    )
    assert json.loads((folder / "settings.json").read_text())["parts"]["kv_heads"] == 1
    for back in (
        load_checkpoint(path, device="cpu"),
        published.load_published(folder, device="cpu"),
    ):
        assert back.model.parts == today and isinstance(
            back.model.encoder.blocks[0].norm1, RMSNorm
        )
        assert isinstance(
            back.model.decoder.blocks[0].cross_attn, GroupedQueryAttention
        )
        assert translate_lines(back, SENTENCES) == translate_lines(
            load_checkpoint(path, device="cpu"), SENTENCES
        )
    plain = published.load_published(
        published.export_model(subword_checkpoint, tmp_path / "p17", card=""),
        device="cpu",
    )
    assert type(plain.model.parts) is Parts  # chapter 7's model stays it


SHIPPED = published.MODELS / published.PUBLISHED


@pytest.mark.skipif(
    not SHIPPED.is_dir(), reason="no model has been published with the course yet"
)
def test_the_published_model_translates_as_when_it_was_published():
    examples = json.loads((SHIPPED / "examples.json").read_text(encoding="utf-8"))
    model = published.load_published(device="cpu")
    assert translate_lines(model, examples["sentences"]) == examples["translations"]
    # what the course ships
    assert sum(p.stat().st_size for p in SHIPPED.iterdir()) <= 25 * 2**20
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "nmt_lib",
            "translate",
            "--model",
            "published",
            "--device",
            "cpu",
        ],
        input="I am cold.\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    cold = examples["translations"][examples["sentences"].index("I am cold.")]
    assert out.returncode == 0 and out.stdout == cold + "\n", out.stderr
    # cased and detokenised
    assert cold[0].isupper() and cold.endswith(".") and " ." not in cold


def test_int8_quantises_every_linear_layer_translates_as_well_and_says_so_in_records(
    tmp_path, capsys
):
    import sacrebleu
    from conftest import cli_call
    from nmt_lib.run.inference import int8

    ckpt = published.load_published(device="cpu")
    examples = json.loads((SHIPPED / "examples.json").read_text(encoding="utf-8"))
    fp32 = translate_lines(ckpt, examples["sentences"])
    parameters = ckpt.parameters
    int8(ckpt)
    # each replaced by its int8 form
    assert not any(type(m) is torch.nn.Linear for m in ckpt.model.modules())
    assert (
        sacrebleu.corpus_bleu(
            translate_lines(ckpt, examples["sentences"]), [fp32]
        ).score
        > 50
    )
    record = tmp_path / "r.json"
    status, out, err = cli_call(
        capsys,
        "evaluate",
        "--model",
        "published",
        "--test",
        "tatoeba",
        "--limit",
        10,
        "--int8",
        "--device",
        "cpu",
        "--record",
        record,
    )
    assert status == 0, err
    written = json.loads(record.read_text())["model"]
    assert written["int8"] is True and written["parameters"] == parameters


def test_the_course_installed_as_a_wheel_translates_with_its_published_model(tmp_path):
    # Built and installed away from the checkout, as on a hosted notebook: the model
    # travels in the wheel.
    build = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "-q",
        "-w",
        tmp_path / "dist",
        ROOT,
    ]
    # no download of the build backend
    if importlib.util.find_spec("setuptools") is not None:
        build.insert(4, "--no-build-isolation")
    subprocess.run(build, check=True, cwd=tmp_path, capture_output=True)
    wheel = next((tmp_path / "dist").glob("nmt_lib-*.whl"))
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            site,
            wheel,
        ],
        check=True,
        capture_output=True,
    )
    code = (
        "import nmt_lib, sys; from nmt_lib.run.inference import translate_lines;from"
        " nmt_lib.run.published import load_published;print(nmt_lib.__file__);"
        " print(translate_lines(load_published(device='cpu'), ['I am cold.'])[0])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    where, french = out.stdout.splitlines()[-2:]
    assert Path(where).is_relative_to(site) and french == "J'ai froid."


def test_a_missing_published_model_says_how_to_get_it(tmp_path):
    with pytest.raises(
        published.CheckpointError, match="holds no published model.*install the course"
    ):
        published.load_published(tmp_path / published.PUBLISHED, device="cpu")
