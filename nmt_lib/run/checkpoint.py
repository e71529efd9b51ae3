"""Checkpoints: one file with everything needed to translate with, evaluate or resume a Transformer,
written all at once (`nmt_lib.run.cache.atomic_save`) and read without running any code."""
import pickle
import zipfile
from dataclasses import asdict
from pathlib import Path

import torch

from nmt_lib.run.cache import atomic_save
from nmt_lib.run.device import default_device
from nmt_lib.run.tokenizers import BY_KIND
from nmt_lib.text import ODD_SPACES, PUNCTUATION, Vocab
from nmt_lib.transformer import Transformer, TransformerConfig

CHECKPOINT_FORMAT = "nmt-course-checkpoint/1"
PREPROCESS = {"function": "nmt_lib.text.preprocess", "lowercase": True,
              "space_before": PUNCTUATION, "odd_spaces": sorted(ODD_SPACES)}


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated, corrupt, or does not fit the code."""


def save_checkpoint(path, model: Transformer, src_vocab: Vocab, tgt_vocab: Vocab, *, data: dict, train=None,
                    progress: dict | None = None, optimizer=None, schedule=None) -> Path:
    """Write everything needed to translate with, or resume, `model` into one file, atomically.

    `train` is the run's `TrainSettings`; `schedule` its learning-rate scheduler."""
    state = lambda obj: obj.state_dict() if obj is not None else None
    return atomic_save({
        "format": CHECKPOINT_FORMAT, "config": asdict(model.cfg), "state_dict": model.state_dict(),
        "src_vocab": list(src_vocab.idx_to_token), "tgt_vocab": list(tgt_vocab.idx_to_token),
        "tokenizer": tokenizer_state(src_vocab, tgt_vocab),
        "data": dict(data), "preprocess": PREPROCESS, "train": asdict(train) if train is not None else None,
        "progress": progress, "optimizer": state(optimizer), "schedule": state(schedule),
    }, path)


def tokenizer_state(src_vocab: Vocab, tgt_vocab: Vocab) -> dict:
    """What rebuilds the tokenizers: their kind, whether one serves both sides, and each one's `state()`
    under `src_` and `tgt_` (nothing for words; the SentencePiece model for subwords)."""
    state = {"kind": tgt_vocab.kind, "shared": src_vocab is tgt_vocab}
    for side, vocab in (("src", src_vocab), ("tgt", tgt_vocab)):
        state.update({f"{side}_{key}": value for key, value in vocab.state().items()})
    return state


def load_vocabularies(payload: dict, path) -> tuple[Vocab, Vocab]:
    """The checkpoint's (source, target) tokenizers, one object if they were shared; `CheckpointError`
    if unusable."""
    tokenizer = payload.get("tokenizer") or {"kind": "word"}          # checkpoints before chapter 8b: words
    try:
        kind = tokenizer.get("kind")
        if kind not in BY_KIND:
            raise ValueError(f"unknown tokenizer kind {kind!r}")
        side = lambda name: {k[len(name) + 1:]: v for k, v in tokenizer.items() if k.startswith(name + "_")}
        src_tokens, tgt_tokens = list(payload["src_vocab"]), list(payload["tgt_vocab"])
        src = BY_KIND[kind].from_state(src_tokens, side("src"))
        tgt = src if tokenizer.get("shared") else BY_KIND[kind].from_state(tgt_tokens, side("tgt"))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{path}: its tokenizer is missing or damaged ({e})") from None
    if src.idx_to_token != src_tokens or tgt.idx_to_token != tgt_tokens:
        raise CheckpointError(f"{path}: its tokenizer does not match its vocabulary (damaged?)")
    return src, tgt


class Checkpoint:
    """A loaded checkpoint: `model` (eval mode), `src_vocab`, `tgt_vocab`, and the raw `payload`."""

    def __init__(self, model, src_vocab, tgt_vocab, payload):
        self.model, self.src_vocab, self.tgt_vocab, self.payload = model, src_vocab, tgt_vocab, payload

    @property
    def step(self) -> int:
        return (self.payload.get("progress") or {}).get("step", 0)


def load_checkpoint(path, device=None) -> Checkpoint:
    """Read a checkpoint safely (`weights_only=True`) onto `device` (default: `default_device()`, which
    `NMT_DEVICE` overrides); raise `CheckpointError` saying what is wrong."""
    path = Path(path)
    device = default_device() if device is None else device
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} not found")
    try:
        payload = torch.load(path, map_location=device, weights_only=True)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError) as e:
        if "Unsupported global" in str(e):   # objects that only full unpickling could rebuild
            raise CheckpointError(f"{path} holds Python objects besides tensors and plain containers; the course "
                                  "does not load such a file, because loading it could run code") from None
        first = str(e).strip().splitlines()[0].split(". ")[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path} is not a readable checkpoint (truncated, corrupt, or not made by "
                              f"torch.save): {first}") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise CheckpointError(f"{path} is not a course checkpoint: format {found!r}, "
                              f"expected {CHECKPOINT_FORMAT!r}")
    missing = [k for k in ("config", "state_dict", "src_vocab", "tgt_vocab", "data") if k not in payload]
    if missing:
        raise CheckpointError(f"{path} lacks {', '.join(missing)}")
    try:
        config = payload["config"]
        if isinstance(config, dict) and "fast_dropout" in config:   # a checkpoint from before the switch moved
            config = {k: v for k, v in config.items() if k != "fast_dropout"}   # to the trainer's settings
        cfg = TransformerConfig(**config)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path} has an unusable config: {e}") from None
    src_vocab, tgt_vocab = load_vocabularies(payload, path)
    if (len(src_vocab), len(tgt_vocab)) != (cfg.src_vocab_size, cfg.tgt_vocab_size):
        raise CheckpointError(f"{path}: vocabularies of {len(src_vocab)} and {len(tgt_vocab)} tokens do not "
                              f"match the config's {cfg.src_vocab_size} and {cfg.tgt_vocab_size}")
    state = payload["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path}: its state_dict is a {type(state).__name__}, not a mapping of names to tensors")
    with torch.device("meta"):                 # the shapes the config implies, without allocating any memory
        expected = {name: tuple(t.shape) for name, t in Transformer(cfg).state_dict().items()}
    found = {name: tuple(t.shape) for name, t in state.items()}
    if found != expected:
        wrong = sorted(set(found) ^ set(expected)) or [n for n in expected if found[n] != expected[n]]
        raise CheckpointError(f"{path}: the weights do not fit the model its config describes "
                              f"(e.g. {', '.join(wrong[:3])})")
    model = Transformer(cfg).to(device)
    model.load_state_dict(state)
    return Checkpoint(model.eval(), src_vocab, tgt_vocab, payload)
