"""Records of runs outside the notebooks (`nmt_lib.run.records`): what `evaluate --record`, `make bench` and
`make soak` write, and what the book's pages are rendered from."""
import errno
import json
import os
import pathlib

import pytest

from nmt_lib.run.cache import SaveError
from nmt_lib.run.records import cpu_name, write_record


def test_a_record_is_stamped_with_the_time_and_the_machine(tmp_path):
    path = write_record(tmp_path / "r.json", {"kind": "test", "bleu": 12.5})
    saved = json.loads(path.read_text())
    assert saved["kind"] == "test" and saved["bleu"] == 12.5
    assert saved["recorded"][:4].isdigit() and saved["recorded"].endswith("+00:00")
    assert saved["machine"]["cpu"] == cpu_name() and saved["machine"]["torch"]
    assert cpu_name().endswith(f"{os.cpu_count()} cores")


def test_a_record_that_cannot_be_written_leaves_the_previous_one(tmp_path, monkeypatch):
    path = write_record(tmp_path / "r.json", {"run": 1})

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_text", full)
    with pytest.raises(SaveError, match="the disk is full; the previous one is kept"):
        write_record(path, {"run": 2})
    monkeypatch.undo()
    assert json.loads(path.read_text())["run"] == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
