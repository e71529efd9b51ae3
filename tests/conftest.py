"""Shared by the tests: the tools on the import path, one small corpus, a tiny
Transformer for it and a few updates of it, the command line and tqdm as a test reads
them, and the `slow` marker."""

import inspect
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

# A small English-German corpus built from templates: every line is
# "english<TAB>german<TAB>note", the third column as in fra.txt, whose last column
# credits the translators.
SUBJECTS = [
    ("i", "ich", "bin", "habe", "sehe"),
    ("you", "du", "bist", "hast", "siehst"),
    ("we", "wir", "sind", "haben", "sehen"),
    ("they", "sie", "sind", "haben", "sehen"),
]
ADJECTIVES = [
    pair.split("/")
    for pair in "tired/müde happy/glücklich cold/kalt hungry/hungrig late/spät".split()
]
NOUNS = [
    ("a dog", "einen Hund"),
    ("a car", "ein Auto"),
    ("the house", "das Haus"),
    ("a book", "ein Buch"),
    ("the cat", "die Katze"),
]


def german_lines() -> list[str]:
    lines = []
    for en, de, sein, haben, sehen in SUBJECTS:
        cap, de_cap, be = en.capitalize(), de.capitalize(), "am" if en == "i" else "are"
        for adj, adj_de in ADJECTIVES:
            lines.append(f"{cap} {be} {adj}.\t{de_cap} {sein} {adj_de}.")
            lines.append(f"{cap} {be} not {adj}!\t{de_cap} {sein} nicht {adj_de}!")
        for noun, noun_de in NOUNS:
            lines.append(f"{cap} have {noun}.\t{de_cap} {haben} {noun_de}.")
            lines.append(f"{cap} see {noun}?\t{de_cap} {sehen} {noun_de}?")
    return [line + "\tCC-BY test" for line in lines]


# A few updates of `tiny_model` on the tiny corpus, as a test's training settings
TINY_RUN = dict(
    epochs=3, max_tokens=60, tokens_per_update=100, warmup=3, checkpoint_every=0
)


# `tiny_model`'s sizes and a few updates, as the command line's options
TINY_ARGS = (
    "--d-model 16 --heads 2 --d-ff 32 --layers 1 --max-tokens 80"
    " --tokens-per-update 100 --warmup 2 --min-freq 1 --progress none"
).split()


def tiny_model(corpus, dropout=0.1):
    """A one-layer Transformer of width 16 for `corpus`, the same weights every call."""
    from nmt_lib.transformer import Transformer, TransformerConfig

    torch.manual_seed(3)
    return Transformer(
        TransformerConfig(
            len(corpus.src_vocab),
            len(corpus.tgt_vocab),
            d_model=16,
            n_heads=2,
            d_ff=32,
            n_layers=1,
            dropout=dropout,
            max_len=32,
        )
    )


def train_tiny(model, corpus, settings=None, *, settings_class=None, **kw) -> dict:
    """`train_run` on `TINY_RUN` changed by `settings`, quietly; its checkpoints keep
    the corpus's settings."""
    from nmt_lib.run.trainer import RunSettings, train_run

    settings = (settings_class or RunSettings)(**TINY_RUN | (settings or {}))
    kw = {"report": "none", "save_kwargs": {"data": corpus.settings}, **kw}
    return train_run(model, corpus, settings, **kw)


def save_model(path, model, corpus, **kw) -> Path:
    """`model` saved at `path` as a checkpoint trained on `corpus`."""
    from nmt_lib.run.checkpoint import save_checkpoint

    vocabs = corpus.src_vocab, corpus.tgt_vocab
    return save_checkpoint(path, model, *vocabs, data=corpus.settings, **kw)


def same_weights(a, b) -> bool:
    """Whether two models hold the same weights, bit for bit."""
    a, b = a.state_dict(), b.state_dict()
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def cli_call(capsys, *args) -> tuple[int, str, str]:
    """`python -m nmt_lib ...` in this process: (exit status, stdout, stderr)."""
    from nmt_lib.run import cli

    status = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def cli_run(*args, stdin=None) -> subprocess.CompletedProcess:
    """`python -m nmt_lib ...` in a process of its own."""
    command = [sys.executable, "-m", "nmt_lib", *map(str, args)]
    return subprocess.run(
        command, input=stdin, capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def tiny_train_args(data, out, *extra) -> list:
    """`train` on the corpus file `data` with `tiny_model`'s sizes, writing `out`."""
    return ["train", "--data", data, *TINY_ARGS, "--out", out, *extra]


def last_drawings(err: str) -> list[str]:
    """What a tqdm bar last drew on each of its lines (it redraws a line with '\\r')."""
    return [line.split("\r")[-1] for line in err.rstrip("\n").split("\n")]


def write_notebook(path, *sources) -> Path:
    """A notebook at `path` with one code cell per source, not yet run."""
    import nbformat

    cells = [nbformat.v4.new_code_cell(source) for source in sources]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    return Path(path)


def write_corpus(folder: Path) -> Path:
    """The corpus as a file in `folder`, for the tests that start processes of their
    own."""
    path = Path(folder) / "deu.txt"
    path.write_text("\n".join(german_lines()) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def de_corpus(tmp_path):
    return write_corpus(tmp_path)


@pytest.fixture
def corpus(de_corpus):
    """The corpus read as the command line reads it, every word in the vocabulary."""
    from nmt_lib.run.corpus import ParallelCorpus

    return ParallelCorpus(de_corpus, min_freq=1)


# A test is slow when it drives a browser, starts processes (the command line, torchrun,
# a kernel) or injects faults: `pytest -m "not slow" tests` is the quick loop without
# them.
SLOW_MODULES = {"test_browser", "test_faults"}
SLOW_CALLS = ("cli_run(", "subprocess.", "torchrun", "nbclient", "train(data")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: drives a browser, starts processes or injects faults"
    )


def pytest_collection_modifyitems(items):
    for item in items:
        if not isinstance(item, pytest.Function):
            continue
        source = inspect.getsource(item.function)
        if item.module.__name__ in SLOW_MODULES or any(
            call in source for call in SLOW_CALLS
        ):
            item.add_marker(pytest.mark.slow)
