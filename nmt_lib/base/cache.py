"""The course's cache folder, files written all at once, and the model cache.

Tooling, not a lesson: chapters that train a model call `cached_fit`, so that a later
chapter can load the weights instead of training again; the command line writes
checkpoints with `atomic_save`.
"""

import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path

import torch

from nmt_lib.base.course import quick_mode

CACHE_ENV = "NMT_CACHE_DIR"
# set (to anything but 0): every chapter loads cached models, none retrains
CLASSROOM_ENV = "NMT_CLASSROOM"


def classroom() -> bool:
    """True in a classroom run (`NMT_CLASSROOM=1`): the chapters that train live by
    default (4b, 7) load their models from the cache that `make course` filled instead,
    when it holds them.
    """
    return os.environ.get(CLASSROOM_ENV, "").strip().lower() not in (
        "",
        "0",
        "false",
        "no",
    )


def cache_home() -> Path:
    """The course's own folder: `$XDG_CACHE_HOME/nmt_course`, by default
    ~/.cache/nmt_course."""
    return (
        Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "nmt_course"
    )


def cache_dir() -> Path:
    """Where trained models are kept: `$NMT_CACHE_DIR`, else `cache_home() /
    "models"`."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return cache_home() / "models"


class SaveError(OSError):
    """A file could not be written (a full disk, a lost folder); the file it would have
    replaced is intact."""


def temporary_files(path) -> list[Path]:
    """The temporary files `atomic_save` makes for `path` (a killed process may leave
    them): exactly those, not a longer name's (`X.pt.bak`'s temporaries start like
    `X.pt`'s)."""
    path = Path(path)
    # tempfile's 8 random characters
    own = re.compile(rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}\.tmp")
    return [p for p in path.parent.glob(f".{path.name}.*.tmp") if own.fullmatch(p.name)]


def atomic_save(obj, path, write=None) -> Path:
    """`write(obj, file)` (`torch.save` by default) to `path` all at once: a temporary
    file beside it, then a rename over it.

    A write that fails (a full disk) raises `SaveError` in one line; `path` is then left
    as it was.
    """
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
    except (
        OSError,
        RuntimeError,
    ) as e:  # torch.save reports a failed write as a RuntimeError
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


def cached_fit(name: str, key: dict, build, fit, *, reuse: bool = True):
    """Return `(model, info)`: `build()` a model, then load its weights from the cache,
    or train it.

    `fit(model)` trains in place and returns `info`, a dict of numbers and lists (kept
    with the weights). `key` holds every setting that changes the result; with
    `reuse=False` the model is trained again and the cache entry replaced, except in a
    classroom run (`classroom()`). The weights load onto the device `build()` chose, and
    are stored on the CPU, so a model trained on a GPU loads on a machine without one.
    """
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
        except (
            RuntimeError,
            KeyError,
            EOFError,
            OSError,
            ValueError,
        ) as e:  # corrupt or mismatched
            warnings.warn(
                f"ignoring unusable cache file {path} ({type(e).__name__}: {e});"
                " training instead"
            )
    info = fit(model)
    weights = {k: v.cpu() for k, v in model.state_dict().items()}
    atomic_save({"state_dict": weights, "info": info, "key": key}, path)
    return model, info
