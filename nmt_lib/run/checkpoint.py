"""Checkpoints: one file with everything needed to translate with, evaluate or resume a
Transformer, written all at once (`nmt_lib.base.cache.atomic_save`) and read without
running any code.
"""

import pickle
from dataclasses import asdict
from pathlib import Path
from zipfile import BadZipFile

import torch

from nmt_lib.base.cache import atomic_save
from nmt_lib.run.corpus import SavedVocab, preparer
from nmt_lib.base.device import default_device
from nmt_lib.subword import SubwordVocab
from nmt_lib.text import Vocab
from nmt_lib.modern import ModernParts, ModernTransformer
from nmt_lib.transformer import Transformer, TransformerConfig

CHECKPOINT_FORMAT = "nmt-course-checkpoint/3"  # 3: the decoder depth moved to the parts
BPE = "sentencepiece-bpe"  # the tokenizer kind a subword vocabulary is saved as


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated, corrupt, or does not fit the code."""


def save_checkpoint(
    path,
    model: Transformer,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    *,
    data: dict,
    train=None,
    progress: dict | None = None,
    optimizer=None,
    schedule=None,
    scaler=None,
    **extras,
) -> Path:
    """Write everything needed to translate with, or resume, `model` into one file,
    atomically: `train` is the run's `TrainSettings`, `scaler` the fp16 loss scaler if
    any, `extras` plain data and tensors a trainer adds; "parts" holds chapter 12's
    switches (None: chapter 7's Transformer)."""
    state = lambda obj: obj.state_dict() if obj is not None else None
    parts = getattr(model, "parts", None)  # chapter 12's ModernTransformer
    return atomic_save(
        {
            "format": CHECKPOINT_FORMAT,
            "config": asdict(model.cfg),
            "parts": asdict(parts) if parts is not None else None,
            "state_dict": model.state_dict(),
            "src_vocab": list(src_vocab.idx_to_token),
            "tgt_vocab": list(tgt_vocab.idx_to_token),
            "tokenizer": tokenizer_state(src_vocab, tgt_vocab),
            "data": dict(data),
            "train": asdict(train) if train is not None else None,
            "progress": progress,
            "optimizer": state(optimizer),
            "schedule": state(schedule),
            "scaler": state(scaler),
            **extras,
        },
        path,
    )


def tokenizer_state(src_vocab: Vocab, tgt_vocab: Vocab) -> dict:
    """What rebuilds the tokenizers: their kind, whether shared, and for subwords each
    side's SentencePiece model (`src_model`, `tgt_model`)."""
    state = {"kind": "word", "shared": src_vocab is tgt_vocab}
    if isinstance(tgt_vocab, SubwordVocab):
        state.update(kind=BPE, src_model=src_vocab.model_bytes)
        state.update(tgt_model=tgt_vocab.model_bytes)
    return state


def load_vocabularies(payload: dict, path) -> tuple[Vocab, Vocab]:
    """The checkpoint's (source, target) tokenizers, one object if they were shared;
    `CheckpointError` if unusable."""
    tokenizer = payload.get("tokenizer")
    try:
        kind = tokenizer.get("kind")
        if kind not in ("word", BPE):
            raise ValueError(f"unknown tokenizer kind {kind!r}")
        src_tokens, tgt_tokens = list(payload["src_vocab"]), list(payload["tgt_vocab"])
        tokens = {"src": src_tokens, "tgt": tgt_tokens}
        rebuild = lambda side: (
            SavedVocab(tokens[side])
            if kind == "word"
            else SubwordVocab(tokenizer[f"{side}_model"])
        )
        src = rebuild("src")
        tgt = src if tokenizer.get("shared") else rebuild("tgt")
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(
            f"{path}: its tokenizer is missing or damaged ({e})"
        ) from None
    if src.idx_to_token != src_tokens or tgt.idx_to_token != tgt_tokens:
        raise CheckpointError(
            f"{path}: its tokenizer does not match its vocabulary (damaged?)"
        )
    return src, tgt


class Checkpoint:
    """A loaded model: `model` (eval mode), `src_vocab`, `tgt_vocab`, and `payload`,
    what its file holds (a checkpoint's payload, or a published model's settings)."""

    def __init__(self, model, src_vocab, tgt_vocab, payload):
        self.model, self.src_vocab, self.tgt_vocab = model, src_vocab, tgt_vocab
        self.payload = payload
        # as trained, whatever `int8` does later
        self.parameters = sum(p.numel() for p in model.parameters())
        self.int8 = False

    @property
    def prepare(self):
        """Raw text -> what `src_vocab` splits, for this model."""
        return preparer(self.payload["data"])

    @property
    def step(self) -> int:
        return (self.payload.get("progress") or {}).get("step", 0)


def read_payload(path: Path, device):
    """`torch.load(weights_only=True)`: plain data only, so loading runs no code."""
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as e:
        # objects that only full unpickling could rebuild
        if "global" in str(e).lower():
            raise CheckpointError(
                f"{path} is not a safe checkpoint: it holds Python objects besides"
                " tensors and plain containers, and loading it could run code"
            ) from None
        raise CheckpointError(
            f"{path} is not a readable checkpoint (corrupt, or not made by torch.save)"
        ) from None
    except (RuntimeError, EOFError, OSError, BadZipFile, ValueError, KeyError) as e:
        raise CheckpointError(
            f"{path} is not a readable checkpoint (truncated, corrupt, or not made by "
            f"torch.save): {first_line(e)}"
        ) from None


def first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0].split(". ")[0] if text else type(e).__name__


def load_checkpoint(path, device=None) -> Checkpoint:
    """Read a checkpoint safely onto `device` (default: `default_device()`); a
    `CheckpointError` says what is wrong."""
    path = Path(path)
    device = default_device() if device is None else device
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} not found")
    payload = read_payload(path, device)
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        is_dict = isinstance(payload, dict)
        found = payload.get("format") if is_dict else type(payload).__name__
        raise older_format(path, found, CHECKPOINT_FORMAT, "train it again") or (
            CheckpointError(
                f"{path} is not a course checkpoint: format {found!r}, expected"
                f" {CHECKPOINT_FORMAT!r}"
            )
        )
    model = model_from(payload, path)
    src_vocab, tgt_vocab = load_vocabularies(payload, path)
    try:
        model.load_state_dict(payload["state_dict"])
    except (RuntimeError, TypeError, AttributeError) as e:
        raise CheckpointError(
            f"{path}: the weights do not fit the model its config describes "
            f"({first_line(e)})"
        ) from None
    return Checkpoint(model.to(device).eval(), src_vocab, tgt_vocab, payload)


def older_format(path, found, expected: str, again: str) -> CheckpointError | None:
    """The error for a file of an older format of the same kind, if `found` is one."""
    if isinstance(found, str) and found.startswith(expected.split("/")[0] + "/"):
        return CheckpointError(
            f"{path} was written by an older version of the course (format {found!r},"
            f" this one reads {expected!r}): {again}"
        )


def model_from(settings: dict, path) -> Transformer:
    """The untrained Transformer that `settings` (a checkpoint's payload, or a published
    model's settings) describe: its config and parts; `CheckpointError` if unusable."""
    try:
        parts = ModernParts(**settings["parts"]) if settings.get("parts") else None
        cfg = TransformerConfig(**settings["config"])
        preparer(settings["data"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{path} is damaged ({first_line(e)})") from None
    return Transformer(cfg) if parts is None else ModernTransformer(cfg, parts)
