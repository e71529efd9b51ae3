"""The public test set: the Tatoeba Translation Challenge's English-French test,
v2021-08-07 (12,681 pairs, CC-BY 2.0 FR, tatoeba.org contributors), downloaded and
checked by SHA-256; and the corpus pairs it rules out of training (the corpus is itself
a Tatoeba export: a pair sharing a side with a test pair must not be trained on).
"""

import unicodedata
from pathlib import Path

from nmt_lib.base.download import default_data_dir, fetch, file_sha1

TATOEBA_FOLDER = "tatoeba-test"
TATOEBA_URL = "https://raw.githubusercontent.com/Helsinki-NLP/OPUS-MT-testsets/master/testsets/eng-fra/"
TATOEBA_FILES = {  # the two files of the OPUS-MT-testsets repository and their SHA-256
    "tatoeba-test-v2021-08-07.eng": (
        "714a848bd6ab4421cafd1b9b09fd26328306fab1bc8006e820fa77a8cbe57636"
    ),
    "tatoeba-test-v2021-08-07.fra": (
        "095313ff04016e5ddeff7557d1c5590f19724d239e424cab313b2d03ca66d365"
    ),
}
TEST_SETS = ("tatoeba",)


def tatoeba_test_dir(data_dir=None, *, download: bool = True) -> Path:
    """`tatoeba-test/` under the data directory, downloaded if it is missing."""
    root = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    folder = root / TATOEBA_FOLDER
    if all((folder / name).is_file() for name in TATOEBA_FILES):
        return folder
    how = (
        f"Download {', '.join(TATOEBA_URL + n for n in TATOEBA_FILES)} into {folder},"
        " or set NMT_DATA_DIR to a folder that holds tatoeba-test/."
    )
    if not download:
        raise FileNotFoundError(f"the Tatoeba test set is not in {folder}. {how}")
    try:  # each file is moved into place once its SHA-256 matched
        for name, sha256 in TATOEBA_FILES.items():
            fetch(TATOEBA_URL + name, f"sha256:{sha256}", folder, fname=name)
    except OSError as e:
        raise FileNotFoundError(
            f"the Tatoeba test set is not in {folder} and the download failed ({e}). "
            f"{how}"
        ) from None
    return folder


def read_tatoeba_test(data_dir=None, *, download: bool = True) -> list[tuple[str, str]]:
    """The 12,681 (English, French) test pairs as written, SHA-256 checked."""
    folder = tatoeba_test_dir(data_dir, download=download)
    sides = []
    for name, sha256 in TATOEBA_FILES.items():
        if file_sha1(folder / name, "sha256") != sha256:
            raise ValueError(
                f"{folder / name} is not the v2021-08-07 test file (its SHA-256"
                " differs); delete it and run again to download it"
            )
        sides.append((folder / name).read_text(encoding="utf-8").split("\n"))
    english, french = (side[:-1] if side and side[-1] == "" else side for side in sides)
    if len(english) != len(french):
        raise ValueError(
            f"{folder}: {len(english):,} English lines but {len(french):,} French ones"
        )
    return list(zip(english, french))


def normalise(text: str) -> str:
    """A sentence as compared for overlap: NFC, odd spaces plain, runs of spaces one."""
    text = unicodedata.normalize("NFC", text).replace("\u202f", " ")
    return " ".join(text.replace("\u00a0", " ").split())


def overlap_filter(test_pairs):
    """Whether a corpus pair shares a side with a test pair, exactly or normalised."""
    english = {s for s, _ in test_pairs} | {normalise(s) for s, _ in test_pairs}
    french = {t for _, t in test_pairs} | {normalise(t) for _, t in test_pairs}
    return lambda src, tgt: (
        src in english
        or tgt in french
        or normalise(src) in english
        or normalise(tgt) in french
    )
