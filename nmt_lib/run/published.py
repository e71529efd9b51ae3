"""A trained model as the course ships it: one folder under `models/` with the weights
in safetensors (half precision by default), the settings, vocabularies and tokenizer as
JSON and SentencePiece files, and a model card. Nothing in it is a pickle, so loading it
runs no code; it goes through the same checks as a checkpoint
(`checkpoint.checkpoint_from`).

    # once, when a model is published
    export_model("runs/best.pt", "models/NAME", card=text)
    # the course's published model
    load_published()
    # the same, from the command line
    python -m nmt_lib translate --model published
"""

import base64
import json
from pathlib import Path

import torch

from nmt_lib.run.checkpoint import (
    CHECKPOINT_FORMAT,
    CheckpointError,
    Checkpoint,
    checkpoint_from,
    load_checkpoint,
)
from nmt_lib.base.device import default_device

PUBLISHED = "tatoeba-en-fr"  # the folder of the shipped model
# the repository's models/ folder
CHECKOUT_MODELS = Path(__file__).resolve().parents[2] / "models"
# inside an installed wheel
INSTALLED_MODELS = Path(__file__).resolve().parents[1] / "models"
# A checkout reads (and tools/publish_model.py writes) the repository's folder; an
# installed course its own copy.
MODELS = (
    INSTALLED_MODELS if (INSTALLED_MODELS / PUBLISHED).is_dir() else CHECKOUT_MODELS
)
HOW_TO_GET = (
    "install the course with its model (pip install the repository, which carries"
    f" models/{PUBLISHED}), or copy the repository's models/{PUBLISHED} folder to"
    " {folder}"
)
FORMAT = "nmt-course-published/1"
KEPT = (
    "config",
    "parts",
    "src_vocab",
    "tgt_vocab",
    "data",
)  # what a published folder keeps


def export_model(
    checkpoint, folder, *, card: str, dtype: torch.dtype = torch.float16
) -> Path:
    """Write the checkpoint's model into `folder`: `model.safetensors` (weights in
    `dtype`), `settings.json` (config, vocabularies, data settings, tokenizer) and
    `README.md` (the model card, `card`). The training state (optimizer, progress) stays
    behind."""
    from safetensors.torch import save_file

    ckpt = (
        checkpoint
        if isinstance(checkpoint, Checkpoint)
        else load_checkpoint(checkpoint, device="cpu")
    )
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # Tied embeddings are one tensor under three names: stored once, the other names
    # listed under "tied".
    weights, tied, first = {}, {}, {}
    for name, t in ckpt.model.state_dict().items():
        if t.data_ptr() in first:
            tied[name] = first[t.data_ptr()]
        else:
            first[t.data_ptr()] = name
            weights[name] = t.detach().to("cpu", dtype).clone()
    overflow = [name for name, t in weights.items() if not torch.isfinite(t).all()]
    if overflow:
        raise ValueError(
            f"{', '.join(overflow[:2])} holds values too large for"
            f" {str(dtype).replace('torch.', '')}: export in float32"
            " (dtype=torch.float32)"
        )
    save_file(weights, folder / "model.safetensors", metadata={"format": FORMAT})
    payload = {k: ckpt.payload[k] for k in KEPT if k in ckpt.payload}
    payload["tied"] = tied
    progress = ckpt.payload.get("progress") or {}
    payload["training"] = {
        "updates": progress.get("step"),
        "seconds": progress.get("seconds"),
        "sessions": progress.get("sessions"),
        "averaged": ckpt.payload.get("averaged"),
    }
    # this machine's path
    payload["data"] = {k: v for k, v in payload["data"].items() if k != "path"}
    tokenizer = dict(ckpt.payload.get("tokenizer") or {"kind": "word"})
    payload["tokenizer"] = {
        k: {"base64": base64.b64encode(v).decode()} if isinstance(v, bytes) else v
        for k, v in tokenizer.items()
    }
    (folder / "settings.json").write_text(
        json.dumps({"format": FORMAT, **payload}, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    (folder / "README.md").write_text(card, encoding="utf-8")
    return folder


def load_published(folder=None, device=None) -> Checkpoint:
    """The model in `folder` (default: the course's published model,
    `models/tatoeba-en-fr`) on `device`, as a `Checkpoint` that `translate_lines` and
    `evaluate_public` take."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(folder) if folder is not None else MODELS / PUBLISHED
    device = default_device() if device is None else device
    if (
        not (folder / "settings.json").is_file()
        or not (folder / "model.safetensors").is_file()
    ):
        raise CheckpointError(
            f"{folder} holds no published model (settings.json and model.safetensors)"
            + (
                "; " + HOW_TO_GET.format(folder=folder)
                if folder.name == PUBLISHED
                else ""
            )
        )
    try:
        settings = json.loads((folder / "settings.json").read_text(encoding="utf-8"))
        weights = load_file(folder / "model.safetensors", device="cpu")
    except (ValueError, OSError, SafetensorError) as e:
        raise CheckpointError(
            f"{folder}: its settings or weights are damaged ({str(e).splitlines()[0]})"
        ) from None
    if not isinstance(settings, dict) or settings.get("format") != FORMAT:
        raise CheckpointError(
            f"{folder}/settings.json is not a published model's (format "
            f"{settings.get('format') if isinstance(settings, dict) else None!r})"
        )
    try:
        tokenizer = {
            k: base64.b64decode(v["base64"]) if isinstance(v, dict) else v
            for k, v in settings["tokenizer"].items()
        }
        tied = settings.get("tied") or {}
        weights.update({alias: weights[name] for alias, name in tied.items()})
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{folder}/settings.json is damaged ({e})") from None
    payload = {
        **{k: settings[k] for k in KEPT + ("training",) if k in settings},
        "format": CHECKPOINT_FORMAT,
        "tokenizer": tokenizer,
        "state_dict": {k: v.float() for k, v in weights.items()},
    }
    ckpt = checkpoint_from(payload, folder, device)
    ckpt.model.to(device)
    return ckpt


def load_model(checkpoint=None, model=None, device=None) -> Checkpoint:
    """What `translate` and `evaluate` run: a checkpoint file, or a published model
    ("published": the course's own; else its folder)."""
    if checkpoint is not None:
        return load_checkpoint(checkpoint, device=device)
    return load_published(None if model == "published" else model, device)
