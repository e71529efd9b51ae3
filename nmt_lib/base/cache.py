"""The course's cache folder, files written all at once (`atomic_save`), and the model
cache (`cached_fit`), from which a later chapter loads weights instead of training.
"""

import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
import warnings
import zlib
from pathlib import Path

import torch

from nmt_lib.base.course import env_flag, quick_mode

CACHE_ENV = "NMT_CACHE_DIR"
# set (to anything but 0): every chapter loads cached models, none retrains
CLASSROOM_ENV = "NMT_CLASSROOM"


def classroom() -> bool:
    """True in a classroom run (`NMT_CLASSROOM=1`): chapters 4b and 7 load their models
    from the cache `make course` filled, when it holds them, instead of training."""
    return env_flag(CLASSROOM_ENV)


def cache_home() -> Path:
    """`$XDG_CACHE_HOME/nmt_course`, by default ~/.cache/nmt_course."""
    return (
        Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "nmt_course"
    )


def cache_dir() -> Path:
    """Where trained models are kept: `$NMT_CACHE_DIR`, else `cache_home()/models`."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return cache_home() / "models"


class SaveError(OSError):
    """A file could not be written (a full disk, a lost folder); the file it would have
    replaced is intact."""


def temporary_files(path) -> list[Path]:
    """The temporary files `atomic_save` makes for `path` (a killed process may leave
    them), not a longer name's (`X.pt.bak`'s start like `X.pt`'s)."""
    path = Path(path)
    # tempfile's 8 random characters
    own = re.compile(rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}\.tmp")
    return [p for p in path.parent.glob(f".{path.name}.*.tmp") if own.fullmatch(p.name)]


def atomic_save(obj, path, write=None) -> Path:
    """`write(obj, file)` (`torch.save` by default) to a temporary file beside `path`,
    renamed over it. A failed write raises a one-line `SaveError`, `path` as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False
    ) as f:
        tmp = Path(f.name)
    try:
        umask = os.umask(0)
        os.umask(umask)
        # as open() would create it, not the temporary file's 0600
        os.chmod(tmp, 0o666 & ~umask)
        (write or torch.save)(obj, tmp)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:  # torch.save's failed write: a RuntimeError
        full = getattr(e, "errno", None) == errno.ENOSPC or disk_is_full(path.parent)
        reason = (
            "the disk is full"
            if full
            else (getattr(e, "strerror", None) or str(e).strip().splitlines()[0])
        )
        what = "the previous one is kept" if path.exists() else "nothing was written"
        raise SaveError(f"could not write {path}: {reason}; {what}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


def disk_is_full(folder, margin: int = 2**20) -> bool:
    """Whether the file system holding `folder` has less than `margin` bytes free."""
    try:
        return shutil.disk_usage(folder).free < margin
    except OSError:
        return False


def data_fingerprint(data) -> str:
    """A short hash of a dataset's splits and vocabularies, for a cache key: equal
    fingerprints, equal data."""
    digest = hashlib.sha1()
    for part in data.splits:
        crc = zlib.crc32("\n".join(f"{s}\t{t}" for s, t in part).encode())
        digest.update(crc.to_bytes(4, "big"))
    tokens = data.src_vocab.idx_to_token + data.tgt_vocab.idx_to_token
    digest.update("\n".join(tokens).encode())
    return digest.hexdigest()[:16]


def cached_fit(name: str, key: dict, build, fit, *, reuse: bool = True):
    """`(model, info)`: `build()` a model, then load its weights from the cache, or
    train it with `fit(model)`, which returns `info` (numbers and lists). `key` holds
    every setting that changes the result; `reuse=False` trains again, except in a
    classroom run. Weights are stored on the CPU and load onto `build()`'s device."""
    digest = hashlib.sha1(
        json.dumps({"quick": quick_mode(), **key}, sort_keys=True).encode()
    ).hexdigest()[:16]
    path = cache_dir() / f"{name}-{digest}.pt"
    model = build()
    if (reuse or classroom()) and path.exists():
        try:
            device = next(model.parameters(), torch.empty(0)).device
            saved = torch.load(path, map_location=device, weights_only=True)
            model.load_state_dict(saved["state_dict"])
            return model, saved["info"]
        except (RuntimeError, KeyError, EOFError, OSError, ValueError) as e:  # corrupt
            warnings.warn(
                f"ignoring unusable cache file {path} ({type(e).__name__}: {e});"
                " training instead"
            )
    info = fit(model)
    weights = {k: v.cpu() for k, v in model.state_dict().items()}
    atomic_save({"state_dict": weights, "info": info, "key": key}, path)
    return model, info
