"""`make bench` (bench/bench.py) runs every section to its end: each on a few lines,
rounds and steps."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("NMT_DATA_DIR", "/nonexistent"))


@pytest.mark.skipif(
    not (DATA / "tatoeba-test").is_dir() or not (DATA / "fra-eng").is_dir(),
    reason="needs the corpus and the Tatoeba test set in NMT_DATA_DIR",
)
def test_every_section_of_the_benchmark_runs_to_its_end(tmp_path):
    out = tmp_path / "bench.json"
    small = [
        "--rounds",
        "1",
        "--steps",
        "1",
        "--decode-sentences",
        "8",
        "--decode-rounds",
        "1",
        "--cpu-lines",
        "20",
        "--skip-nbval",
        "--fallback-steps",
        "1",
        "--out",
        str(out),
    ]
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench.py"), *small],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(out.read_text())
    assert (
        result["cpu_translation"]["lines"] == 20
        and "nrefs:1" in result["cpu_translation"]["signature"]
    )
    assert {"training", "decoding", "shallow_decoder", "tables"} <= set(result)
