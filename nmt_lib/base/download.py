"""The corpus on disk: where it is looked for, and its download with a checksum.

The Tatoeba English-French pairs (CC-BY 2.0 FR), in d2l's archive.
"""

import hashlib
import os
import shutil
import sys
import tempfile
import urllib.request
import zipfile
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
    """The SHA-1 (or another `hashlib` digest) of a file, read in blocks (the whole
    corpus never sits in memory twice)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, algorithm).hexdigest()


def fetch(url: str, path) -> None:
    """Download `url` into the file `path` (a temporary one: the caller checks it, then
    moves it)."""
    with urllib.request.urlopen(url, timeout=60) as response, open(path, "wb") as f:
        shutil.copyfileobj(response, f)


def download_fra_eng(data_dir, *, url: str = DATA_URL, sha1: str = DATA_SHA1) -> Path:
    """Download and verify the archive, then move `fra-eng/` into `data_dir`.

    Everything happens in a temporary folder inside `data_dir`; each file is moved into
    place with an atomic rename only after the checksum matched, so a failure leaves no
    partial file.
    """
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=data_dir, prefix=".download-") as tmp:
        archive = Path(tmp) / "fra-eng.zip"
        sys.stderr.write(f"Downloading {url} into {data_dir} ...\n")
        fetch(url, archive)
        got = file_sha1(archive)
        if got != sha1:
            raise ValueError(
                f"{url} has SHA-1 {got}, expected {sha1}: the download is corrupt "
                "or not the fra-eng archive. Nothing was written; try again."
            )
        unpacked = Path(tmp) / "unpacked"
        with zipfile.ZipFile(archive) as z:
            z.extractall(unpacked)
        source = unpacked / "fra-eng"
        if not (source / "fra.txt").is_file():
            raise ValueError(f"{url} holds no fra-eng/fra.txt; nothing was written.")
        target = data_dir / "fra-eng"
        target.mkdir(exist_ok=True)
        # fra.txt last: its presence means the whole folder is in place.
        for f in sorted(source.iterdir(), key=lambda p: p.name == "fra.txt"):
            os.replace(f, target / f.name)
    return target / "fra.txt"


def fra_eng_path(
    data_dir=None, *, download: bool = True, url: str = DATA_URL, sha1: str = DATA_SHA1
) -> Path:
    """Path of `fra-eng/fra.txt` under the data directory, downloading it if it is
    missing."""
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
    except (OSError, zipfile.BadZipFile) as e:
        raise FileNotFoundError(
            f"{path} not found and the download failed ({e}). {how}"
        ) from None
