"""A trained model as the course ships it: a folder under `models/` with the weights
in safetensors (half precision by default), settings and vocabularies as JSON, the
SentencePiece model and a model card. No pickle: loading runs no code, and the settings
go through a checkpoint's checks.

    # once, when a model is published
    export_model("runs/best.pt", "models/NAME", card=text)
    # the course's published model
    load_published()
    # the same, from the command line
    python -m nmt_lib translate --model published
"""

import copy
import json
from pathlib import Path

import torch

from nmt_lib.base.device import default_device
from nmt_lib.run.checkpoint import Checkpoint, CheckpointError, first_line
from nmt_lib.run.checkpoint import load_checkpoint, load_vocabularies, model_from
from nmt_lib.run.checkpoint import older_format, tokenizer_state

PUBLISHED = "tatoeba-en-fr"  # the folder of the shipped model
# an installed wheel's copy, else the repository's folder (tools/publish_model.py's)
INSTALLED_MODELS = Path(__file__).resolve().parents[1] / "models"
CHECKOUT_MODELS = Path(__file__).resolve().parents[2] / "models"
MODELS = (
    INSTALLED_MODELS if (INSTALLED_MODELS / PUBLISHED).is_dir() else CHECKOUT_MODELS
)
HOW_TO_GET = (
    "install the course with its model (pip install the repository, which carries"
    f" models/{PUBLISHED}), or copy the repository's models/{PUBLISHED} folder to"
    " {folder}"
)
FORMAT = "nmt-course-published/2"  # 2: the SentencePiece model in a file of its own
KEPT = ("config", "parts", "src_vocab", "tgt_vocab", "data", "train")  # a folder keeps


def export_model(
    checkpoint, folder, *, card: str, dtype: torch.dtype = torch.float16
) -> Path:
    """Write the checkpoint's model into `folder`: `model.safetensors` (in `dtype`),
    `settings.json`, the SentencePiece model if any, and `card` as `README.md`; the
    training state stays behind."""
    from safetensors.torch import save_model

    ckpt = (
        checkpoint
        if isinstance(checkpoint, Checkpoint)
        else load_checkpoint(checkpoint, device="cpu")
    )
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model = copy.deepcopy(ckpt.model).to("cpu", dtype)  # the caller's stays as it is
    overflow = [
        name
        for name, t in model.state_dict().items()
        if t.is_floating_point() and not torch.isfinite(t).all()
    ]
    if overflow:
        raise ValueError(
            f"{', '.join(overflow[:2])} holds values too large for"
            f" {str(dtype).replace('torch.', '')}: export in float32"
            " (dtype=torch.float32)"
        )
    # Tied embeddings are one tensor under three names: save_model stores it once.
    save_model(model, folder / "model.safetensors", metadata={"format": FORMAT})
    settings = {k: ckpt.payload[k] for k in KEPT if k in ckpt.payload}
    # this machine's path
    settings["data"] = {k: v for k, v in settings["data"].items() if k != "path"}
    progress = ckpt.payload.get("progress") or {}
    settings["training"] = {
        "updates": progress.get("step"),
        "seconds": progress.get("seconds"),
        "sessions": progress.get("sessions"),
        "averaged": ckpt.payload.get("averaged"),
    }
    settings["tokenizer"] = save_tokenizer(ckpt.src_vocab, ckpt.tgt_vocab, folder)
    (folder / "settings.json").write_text(
        json.dumps({"format": FORMAT, **settings}, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    (folder / "README.md").write_text(card, encoding="utf-8")
    return folder


def save_tokenizer(src_vocab, tgt_vocab, folder: Path) -> dict:
    """The tokenizers' state as `settings.json` keeps it: each SentencePiece model
    written to `folder` (`tokenizer.model` if shared, else `src.model`, `tgt.model`),
    named under `files`."""
    state, files = tokenizer_state(src_vocab, tgt_vocab), {}
    for key, value in state.items():
        if isinstance(value, bytes):
            side, _, what = key.partition("_")
            files[key] = f"{'tokenizer' if state['shared'] else side}.{what}"
            (folder / files[key]).write_bytes(value)
    return {k: v for k, v in state.items() if k not in files} | {"files": files}


def load_published(folder=None, device=None) -> Checkpoint:
    """The model in `folder` (default: the course's) on `device`, as a `Checkpoint`
    whose `payload` is the folder's settings."""
    from safetensors import SafetensorError
    from safetensors.torch import load_model

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
    except (ValueError, OSError) as e:
        raise CheckpointError(
            f"{folder}/settings.json is damaged ({first_line(e)})"
        ) from None
    found = settings.get("format") if isinstance(settings, dict) else None
    if found != FORMAT:
        raise older_format(folder, found, FORMAT, "export it again") or CheckpointError(
            f"{folder}/settings.json is not a published model's (format {found!r})"
        )
    model = model_from(settings, folder)
    try:  # the tokenizers' state, with the models its files hold
        files = settings["tokenizer"]["files"]
        tokenizer = {k: v for k, v in settings["tokenizer"].items() if k != "files"}
        tokenizer |= {key: (folder / name).read_bytes() for key, name in files.items()}
    except (KeyError, TypeError, AttributeError, OSError) as e:
        raise CheckpointError(
            f"{folder}: its tokenizer is missing or damaged ({first_line(e)})"
        ) from None
    src_vocab, tgt_vocab = load_vocabularies(
        {**settings, "tokenizer": tokenizer}, folder
    )
    try:
        load_model(model, folder / "model.safetensors")
    except (RuntimeError, OSError, SafetensorError) as e:
        raise CheckpointError(
            f"{folder}/model.safetensors is damaged or does not fit the model its"
            f" settings describe ({first_line(e)})"
        ) from None
    return Checkpoint(model.to(device).eval(), src_vocab, tgt_vocab, settings)


def load_model(checkpoint=None, model=None, device=None) -> Checkpoint:
    """What `translate` and `evaluate` run: a checkpoint file, or a published model
    ("published": the course's own; else its folder)."""
    if checkpoint is not None:
        return load_checkpoint(checkpoint, device=device)
    return load_published(None if model == "published" else model, device)
