"""nmt_lib.base.course and nmt_lib.base.cache: quick mode, figure saving, headline numbers, the model cache."""

import matplotlib
import pytest

matplotlib.use("Agg")

from nmt_lib.base import cache  # noqa: E402


def test_cached_fit_trains_once_then_loads_and_keys_by_settings(monkeypatch, tmp_path):
    import torch
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("NMT_QUICK", raising=False)
    calls = []

    def build():
        return torch.nn.Linear(3, 2)

    def fit(model):
        calls.append(1)
        with torch.no_grad():
            model.weight.fill_(len(calls))
        return {"history": {"loss": [2.0, 1.0], "valid": [None, 0.5]}, "seconds": 1.5}

    model, info = cache.cached_fit("toy", {"epochs": 2}, build, fit)
    again, info2 = cache.cached_fit("toy", {"epochs": 2}, build, fit)
    assert len(calls) == 1 and torch.equal(again.weight, model.weight) and info2 == info
    cache.cached_fit("toy", {"epochs": 3}, build, fit)                 # other settings: trained anew
    assert len(calls) == 2
    retrained, _ = cache.cached_fit("toy", {"epochs": 2}, build, fit, reuse=False)
    assert len(calls) == 3 and retrained.weight[0, 0].item() == 3.0
    monkeypatch.setenv("NMT_QUICK", "1")                                 # quick mode never loads learner weights
    cache.cached_fit("toy", {"epochs": 2}, build, fit)
    assert len(calls) == 4
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".tmp"]     # no temporary files left


def test_cached_fit_retrains_on_a_corrupt_file(monkeypatch, tmp_path):
    import torch
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path))
    fit = lambda model: {"seconds": 0.0}
    cache.cached_fit("toy", {}, lambda: torch.nn.Linear(2, 2), fit)
    (path,) = tmp_path.glob("toy-*.pt")
    path.write_bytes(path.read_bytes()[:50])                             # truncated
    with pytest.warns(UserWarning, match="unusable cache file"):
        cache.cached_fit("toy", {}, lambda: torch.nn.Linear(2, 2), fit)
    with pytest.warns(UserWarning, match="unusable cache file"):         # a model of another shape
        cache.cached_fit("toy", {}, lambda: torch.nn.Linear(2, 3), fit)


def test_atomic_save_writes_whole_files_with_the_umask_and_leaves_no_temporary(tmp_path):
    import os
    import torch
    old = os.umask(0o027)
    try:
        path = cache.atomic_save({"x": torch.ones(2)}, tmp_path / "deep" / "file.pt")
    finally:
        os.umask(old)
    assert torch.load(path, weights_only=True)["x"].tolist() == [1.0, 1.0]
    assert (path.stat().st_mode & 0o777) == 0o640                        # 0o666 under the umask 027, not 0600
    assert [p.name for p in path.parent.iterdir()] == ["file.pt"]


def test_the_readme_and_the_guide_show_the_figures_of_the_executed_notebooks():
    import render_tables

    chapters = [render_tables.chapter(p) for p in sorted((render_tables.ROOT / "notebooks").glob("*.ipynb"))]
    assert all(ch["executed"] and ch["mode"] == "learner" and ch["wall"] for ch in chapters), \
        "every chapter is committed executed by tools/run_course.py --inplace, in learner mode"
    stale = [name for name, (now, new) in render_tables.render().items() if now != new]
    assert stale == [], "run python tools/render_tables.py"
