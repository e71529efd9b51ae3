"""Checkpoints: one file with everything needed to translate with, evaluate or resume a Transformer,
written all at once (`nmt_lib.base.cache.atomic_save`) and read without running any code."""
import pickle
import zipfile
from dataclasses import asdict
from pathlib import Path

import torch

from nmt_lib.base.cache import atomic_save
from nmt_lib.run.corpus import CorpusSettings, keeps_case, preparer
from nmt_lib.base.device import default_device
from nmt_lib.run.sizes import check_model_size, field_errors
from nmt_lib.run.tokenizers import BY_KIND
from nmt_lib.text import ODD_SPACES, PUNCTUATION, Vocab
from nmt_lib.modern import ModernParts
from nmt_lib.transformer import Transformer, TransformerConfig

CHECKPOINT_FORMAT = "nmt-course-checkpoint/2"
PREPROCESS = {"function": "nmt_lib.text.preprocess", "lowercase": True,
              "space_before": PUNCTUATION, "odd_spaces": sorted(ODD_SPACES)}
RAW = {"function": "nmt_lib.run.corpus.unify_spaces", "lowercase": False, "odd_spaces": sorted(ODD_SPACES)}


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated, corrupt, or does not fit the code."""


def save_checkpoint(path, model: Transformer, src_vocab: Vocab, tgt_vocab: Vocab, *, data: dict, train=None,
                    progress: dict | None = None, optimizer=None, schedule=None, scaler=None) -> Path:
    """Write everything needed to translate with, or resume, `model` into one file, atomically.

    `train` is the run's `TrainSettings`; `schedule` its learning-rate scheduler; `scaler` the fp16 loss
    scaler (its scale and growth tracker), if it has one. Which model it is: the config, and `parts`,
    chapter 12's switches (None: chapter 7's Transformer)."""
    state = lambda obj: obj.state_dict() if obj is not None else None
    return atomic_save({
        "format": CHECKPOINT_FORMAT, "config": asdict(model.cfg), "parts": parts_state(model.parts),
        "state_dict": model.state_dict(),
        "src_vocab": list(src_vocab.idx_to_token), "tgt_vocab": list(tgt_vocab.idx_to_token),
        "tokenizer": tokenizer_state(src_vocab, tgt_vocab),
        "data": dict(data), "preprocess": RAW if keeps_case(data) else PREPROCESS,
        "train": asdict(train) if train is not None else None,
        "progress": progress, "optimizer": state(optimizer), "schedule": state(schedule), "scaler": state(scaler),
    }, path)


def parts_state(parts) -> dict | None:
    """What a checkpoint records of a model's parts: None for chapter 7's, else `ModernParts`' switches."""
    return asdict(parts) if isinstance(parts, ModernParts) else None


def check_parts(state, path) -> ModernParts | None:
    """The parts a checkpoint records, rebuilt; `CheckpointError` if they are damaged."""
    if state is None:
        return None
    wrong = ["not a mapping"] if not isinstance(state, dict) else field_errors(state, ModernParts)
    if wrong:
        raise CheckpointError(f"{path}: its parts are damaged ({'; '.join(wrong[:3])})")
    return ModernParts(**state)


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
    tokenizer = payload.get("tokenizer")
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
    def prepare(self):
        """What turns raw text into what `src_vocab` splits, for this model (`corpus.preparer`)."""
        return preparer(self.payload["data"])

    @property
    def step(self) -> int:
        return (self.payload.get("progress") or {}).get("step", 0)


def read_payload(path: Path, device):
    """`torch.load` of a file `torch.save` wrote, after checking the archive: stored entries only (it never
    compresses), whose declared sizes fit in the file, so that `torch.load` takes no more memory than the
    file's size (a small crafted archive could otherwise inflate to gigabytes). What the weights then take
    is bounded by the size ceiling (`sizes.check_model_size`), checked before the model is built."""
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise CheckpointError(f"{path} is not a readable checkpoint (truncated, corrupt, or not made by "
                              f"torch.save): {e}") from None
    if any(e.compress_type != zipfile.ZIP_STORED for e in entries):
        raise CheckpointError(f"{path} holds compressed entries, which torch.save never writes: not a course "
                              "checkpoint (it is not read, since it could inflate to any size)")
    if sum(e.file_size for e in entries) > path.stat().st_size:
        raise CheckpointError(f"{path} declares more data than the file holds: truncated or crafted")
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as e:        # objects that only full unpickling could rebuild
        if "weights only" in str(e).lower() or "global" in str(e).lower():
            raise CheckpointError(f"{path} is not a safe checkpoint: it holds Python objects besides tensors and "
                                  "plain containers, and loading it could run code, so the course does not") from None
        raise CheckpointError(f"{path} is not a readable checkpoint (corrupt): {first_line(e)}") from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError, KeyError) as e:
        raise CheckpointError(f"{path} is not a readable checkpoint (truncated, corrupt, or not made by "
                              f"torch.save): {first_line(e)}") from None


def first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0].split(". ")[0] if text else type(e).__name__


def check_config(config, parts, path) -> TransformerConfig:
    """The checkpoint's model config, its types checked field by field, and its size (with `parts`)."""
    if not isinstance(config, dict):
        raise CheckpointError(f"{path} has an unusable config: a {type(config).__name__}, not a mapping")
    wrong = field_errors(config, TransformerConfig)
    if wrong:
        raise CheckpointError(f"{path} has an unusable config: {'; '.join(wrong[:3])}")
    try:
        cfg = TransformerConfig(**config)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path} has an unusable config: {e}") from None
    try:
        check_model_size(config, parts=parts, training=False, what=f"the model {path} describes")
    except ValueError as e:
        raise CheckpointError(str(e)) from None
    return cfg


def check_weights(state, cfg: TransformerConfig, parts, path):
    """Dense floating-point tensors with the shapes the config implies, every value finite."""
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path}: its state_dict is a {type(state).__name__}, not a mapping of names to tensors")
    odd = [name for name, t in state.items() if t.layout != torch.strided or not t.is_floating_point()]
    if odd:
        raise CheckpointError(f"{path}: its weights must be dense floating-point tensors, unlike {', '.join(odd[:3])}")
    with torch.device("meta"):                 # the shapes the config implies, without allocating any memory
        expected = {name: tuple(t.shape) for name, t in Transformer(cfg, parts).state_dict().items()}
    found = {name: tuple(t.shape) for name, t in state.items()}
    if found != expected:
        wrong = sorted(set(found) ^ set(expected)) or [n for n in expected if found[n] != expected[n]]
        raise CheckpointError(f"{path}: the weights do not fit the model its config describes "
                              f"(e.g. {', '.join(wrong[:3])})")
    broken = [name for name, t in state.items() if not torch.isfinite(t).all()]
    if broken:
        raise CheckpointError(f"{path}: its weights hold NaN or infinite values (e.g. {', '.join(broken[:2])}): "
                              "the run that wrote it diverged, so it cannot translate")


def load_checkpoint(path, device=None) -> Checkpoint:
    """Read a checkpoint safely (`weights_only=True`) onto `device` (default: `default_device()`, which
    `NMT_DEVICE` overrides); raise `CheckpointError` saying what is wrong. Every field is checked before
    the model is built: its types, its size by arithmetic (at most `sizes.MAX_PARAMETERS`), the weights'
    shapes, and that they are finite."""
    path = Path(path)
    device = default_device() if device is None else device
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} not found")
    return checkpoint_from(read_payload(path, device), path, device)


def checkpoint_from(payload, path, device) -> Checkpoint:
    """A `Checkpoint` from a payload read from `path` (a checkpoint file, or a published model's folder),
    every field checked as `load_checkpoint` says."""
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        if isinstance(found, str) and found.startswith(CHECKPOINT_FORMAT.split("/")[0] + "/"):
            raise CheckpointError(f"{path} was written by an older version of the course (format {found!r}, this "
                                  f"one reads {CHECKPOINT_FORMAT!r}): train it again")
        raise CheckpointError(f"{path} is not a course checkpoint: format {found!r}, "
                              f"expected {CHECKPOINT_FORMAT!r}")
    missing = [k for k in ("config", "state_dict", "src_vocab", "tgt_vocab", "data") if k not in payload]
    if missing:
        raise CheckpointError(f"{path} lacks {', '.join(missing)}")
    parts = check_parts(payload.get("parts"), path)
    cfg = check_config(payload["config"], parts, path)
    for side in ("src_vocab", "tgt_vocab"):
        tokens = payload[side]
        if not isinstance(tokens, (list, tuple)) or not all(isinstance(t, str) for t in tokens):
            raise CheckpointError(f"{path}: its {side} must be a list of token strings")
    data = payload["data"]
    wrong = ["not a mapping"] if not isinstance(data, dict) else field_errors(
        {k: v for k, v in data.items() if k != "path"}, CorpusSettings, known_only=True)
    if isinstance(data, dict) and not isinstance(data.get("path", ""), str):
        wrong.append(f"path: expected a file name, got {data['path']!r:.40}")
    if not wrong:                              # the right types; now the values, as the command line checks them
        try:
            CorpusSettings(**{k: v for k, v in data.items() if k in CorpusSettings.__dataclass_fields__})
        except (TypeError, ValueError) as e:
            wrong.append(str(e))
    if wrong:
        raise CheckpointError(f"{path}: its data settings are damaged ({'; '.join(wrong[:3])})")
    src_vocab, tgt_vocab = load_vocabularies(payload, path)
    if (len(src_vocab), len(tgt_vocab)) != (cfg.src_vocab_size, cfg.tgt_vocab_size):
        raise CheckpointError(f"{path}: vocabularies of {len(src_vocab)} and {len(tgt_vocab)} tokens do not "
                              f"match the config's {cfg.src_vocab_size} and {cfg.tgt_vocab_size}")
    state = payload["state_dict"]
    check_weights(state, cfg, parts, path)
    model = Transformer(cfg, parts).to(device)
    model.load_state_dict(state)
    return Checkpoint(model.eval(), src_vocab, tgt_vocab, payload)
