"""The course's one downloader (`nmt_lib.base.download.fetch`, pooch) on files that a
local HTTP server serves: what lands has the hash the course checks, a corrupt or failed
download leaves nothing where the course looks, and a folder that holds the data is
only read."""

import functools
import hashlib
import http.server
import io
import tarfile
import threading
import zipfile

import pytest

import fetch_static
from nmt_lib.base import download as DL
from nmt_lib.run import testsets


@pytest.fixture
def served(tmp_path):
    """A folder served on 127.0.0.1, and its URL."""
    folder = tmp_path / "served"
    folder.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=folder)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield folder, f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()
    server.server_close()


def files_under(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def test_the_corpus_lands_whole_or_not_at_all(tmp_path, served, monkeypatch):
    folder, url = served
    with zipfile.ZipFile(folder / "fra-eng.zip", "w") as z:
        z.writestr("fra-eng/_about.txt", "CC-BY 2.0 FR")
        z.writestr("fra-eng/fra.txt", "Go.\tVa !\n")
    sha1 = hashlib.sha1((folder / "fra-eng.zip").read_bytes()).hexdigest()
    data = tmp_path / "data"
    with pytest.raises(ValueError, match="corrupt"):
        DL.fra_eng_path(data, url=url + "fra-eng.zip", sha1="0" * 40)
    with pytest.raises(FileNotFoundError, match="NMT_DATA_DIR"):  # where to put it
        DL.fra_eng_path(data, url=url + "absent.zip", sha1=sha1)
    assert files_under(data) == []
    path = DL.fra_eng_path(data, url=url + "fra-eng.zip", sha1=sha1)
    assert path == data / "fra-eng" / "fra.txt" and path.read_text() == "Go.\tVa !\n"
    assert files_under(data) == ["fra-eng", "fra-eng/_about.txt", "fra-eng/fra.txt"]
    # a classroom's read-only NMT_DATA_DIR that holds the corpus: nothing is fetched
    monkeypatch.setenv("NMT_DATA_DIR", str(data))
    monkeypatch.setattr(DL, "fetch", lambda *a, **k: pytest.fail("downloaded again"))
    assert DL.fra_eng_path() == path


def test_the_test_set_lands_one_checked_file_at_a_time(tmp_path, served, monkeypatch):
    folder, url = served
    good = {"t.eng": b"Hello.\n", "t.fra": b"Bonjour.\n"}
    sha256 = {n: hashlib.sha256(b).hexdigest() for n, b in good.items()}
    monkeypatch.setattr(testsets, "TATOEBA_URL", url)
    monkeypatch.setattr(testsets, "TATOEBA_FILES", sha256)
    (folder / "t.eng").write_bytes(good["t.eng"])
    (folder / "t.fra").write_bytes(b"Corrupt.\n")
    with pytest.raises(ValueError, match="corrupt"):
        testsets.tatoeba_test_dir(tmp_path)
    # the English file, checked, is in place; nothing of the French one
    assert files_under(tmp_path / testsets.TATOEBA_FOLDER) == ["t.eng"]
    (folder / "t.fra").write_bytes(good["t.fra"])
    assert testsets.read_tatoeba_test(tmp_path) == [("Hello.", "Bonjour.")]
    with pytest.raises(FileNotFoundError, match="NMT_DATA_DIR"):
        testsets.tatoeba_test_dir(tmp_path / "elsewhere", download=False)


def test_fetch_static_unpacks_only_what_the_pages_load(tmp_path, served, monkeypatch):
    folder, url = served
    tgz = folder / "reveal.js" / "-" / "reveal.js-1.tgz"
    tgz.parent.mkdir(parents=True)
    with tarfile.open(tgz, "w:gz") as tar:
        for name in ["package/dist/reveal.js", "package/plugin/x.js", "package/R.md"]:
            info = tarfile.TarInfo(name)
            info.size = len(name)
            tar.addfile(info, io.BytesIO(name.encode()))
    _, _, *layout = fetch_static.PACKAGES["reveal.js"]
    monkeypatch.setattr(fetch_static, "REGISTRY", url.rstrip("/"))
    target = tmp_path / "build" / "reveal.js"

    def run(sha256):
        packages = {"reveal.js": ("1", sha256, *layout)}
        monkeypatch.setattr(fetch_static, "PACKAGES", packages)
        return fetch_static.main(["reveal.js", str(target)])

    assert run("0" * 64) == 1
    assert files_under(target.parent) == []  # nothing beside the target either
    assert run(hashlib.sha256(tgz.read_bytes()).hexdigest()) == 0
    assert files_under(target) == ["dist", "dist/reveal.js", "plugin", "plugin/x.js"]
