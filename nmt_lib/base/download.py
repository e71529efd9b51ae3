"""The corpus on disk (the Tatoeba English-French pairs, CC-BY 2.0 FR, in d2l's archive)
and the course's one downloader (pooch, each file checked by its SHA-1 or SHA-256).
"""

import hashlib
import os
import tempfile
from pathlib import Path

from nmt_lib.base.cache import cache_home

DATA_URL = "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"
DATA_SHA1 = "94646ad1522d915e7b0f9296181140edcf86a4f5"
DATA_ENV = "NMT_DATA_DIR"


def default_data_dir() -> Path:
    """`$NMT_DATA_DIR` if set, else the course's cache folder (~/.cache/nmt_course)."""
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV]).expanduser()
    return cache_home()


def file_sha1(path, algorithm: str = "sha1") -> str:
    """The SHA-1 (or another `hashlib` digest) of a file, read in blocks."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, algorithm).hexdigest()


def fetch(url: str, known_hash: str, folder, *, fname=None, processor=None):
    """`pooch.retrieve`: download `url` into `folder` (as `fname`), check `known_hash`
    ("sha1:..." or "sha256:..."), then `processor` (`pooch.Unzip`, ...). pooch moves the
    file into place once its hash matched; a failed download is an OSError."""
    import pooch  # only a download needs it: an offline data folder never imports it

    try:
        return pooch.retrieve(
            url, known_hash, fname=fname, path=folder, processor=processor
        )
    except ValueError:  # pooch's hash check
        raise ValueError(
            f"{url} does not have the {known_hash.split(':')[0].upper()} the course"
            " expects: the download is corrupt or the file has changed. Nothing was"
            " written; run again to download it again."
        ) from None


def download_fra_eng(data_dir, *, url: str = DATA_URL, sha1: str = DATA_SHA1) -> Path:
    """Download and unzip the archive inside `data_dir`, then move `fra-eng/` into
    place, `fra.txt` last (it means the folder is whole)."""
    import pooch

    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=data_dir, prefix=".download-") as tmp:
        unzip = pooch.Unzip(extract_dir="unpacked")
        fetch(url, f"sha1:{sha1}", tmp, fname="fra-eng.zip", processor=unzip)
        source = Path(tmp) / "unpacked" / "fra-eng"
        target = data_dir / "fra-eng"
        target.mkdir(exist_ok=True)
        for f in sorted(source.iterdir(), key=lambda p: p.name == "fra.txt"):
            os.replace(f, target / f.name)
    return target / "fra.txt"


def fra_eng_path(
    data_dir=None, *, download: bool = True, url: str = DATA_URL, sha1: str = DATA_SHA1
) -> Path:
    """`fra-eng/fra.txt` under the data directory, downloaded if it is missing."""
    root = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    path = root / "fra-eng" / "fra.txt"
    if path.is_file():
        return path
    how = (
        f"Download {DATA_URL}, unzip it into {root} so that {path} exists, or set "
        f"{DATA_ENV} to a folder that holds fra-eng/fra.txt."
    )
    if not download:
        raise FileNotFoundError(f"{path} not found. {how}")
    try:
        return download_fra_eng(root, url=url, sha1=sha1)
    except OSError as e:
        raise FileNotFoundError(
            f"{path} not found and the download failed ({e}). {how}"
        ) from None
