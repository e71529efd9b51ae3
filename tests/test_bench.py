"""`make bench` (bench/bench.py) runs every section to its end, each on a few lines,
rounds and steps; its training rounds share the epoch's length mix."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # bench/ is a folder of the repository, not a package
DATA = Path(os.environ.get("NMT_DATA_DIR", "/nonexistent"))

from bench.training import round_batches  # noqa: E402


@pytest.mark.skipif(
    not (DATA / "tatoeba-test").is_dir() or not (DATA / "fra-eng").is_dir(),
    reason="needs the corpus and the Tatoeba test set in NMT_DATA_DIR",
)
def test_every_section_of_the_benchmark_runs_to_its_end(tmp_path):
    out = tmp_path / "bench.json"
    small = "--rounds 1 --steps 1 --decode-sentences 8 --decode-rounds 1 --cpu-lines 20"
    run = subprocess.run(
        [sys.executable, ROOT / "bench" / "bench.py", *small.split(), "--out", out],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(out.read_text())
    assert {"training", "decoding", "cpu_translation", "tables"} <= set(result)
    assert result["decoding"]["sentences"] == 8
    assert result["cpu_translation"]["lines"] == 20
    assert "nrefs:1" in result["cpu_translation"]["signature"]


def test_training_rounds_are_disjoint_and_share_the_epochs_length_mix():
    # sentence i has i + 1 target tokens; one sentence per batch, in any order
    dataset = SimpleNamespace(tgt=[[0] * n for n in range(1, 41)])
    batches = [[i] for i in range(40)][::-1]
    rounds = round_batches(batches, dataset, rounds=4, steps=5)
    assert [len(r) for r in rounds] == [5] * 4
    assert len({b[0] for r in rounds for b in r}) == 20  # no batch in two rounds
    lengths = [sorted(len(dataset.tgt[b[0]]) for b in r) for r in rounds]
    assert all(ls[0] <= 8 and ls[-1] >= 33 for ls in lengths)  # short to long
    totals = [sum(ls) for ls in lengths]
    assert max(totals) - min(totals) <= 8
