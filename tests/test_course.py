"""nmt_lib.base.course and nmt_lib.base.cache: quick mode, figure saving, headline
numbers, the model cache."""

import json

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
    cache.cached_fit("toy", {"epochs": 3}, build, fit)  # other settings: trained anew
    assert len(calls) == 2
    retrained, _ = cache.cached_fit("toy", {"epochs": 2}, build, fit, reuse=False)
    assert len(calls) == 3 and retrained.weight[0, 0].item() == 3.0
    monkeypatch.setenv("NMT_QUICK", "1")  # quick mode never loads learner weights
    cache.cached_fit("toy", {"epochs": 2}, build, fit)
    assert len(calls) == 4
    # no temporary files left
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".tmp"]


def test_a_classroom_run_loads_what_a_chapter_would_retrain(monkeypatch, tmp_path):
    import torch

    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("NMT_QUICK", raising=False)
    calls = []
    fit = lambda model: calls.append(1) or {"seconds": 1.0}
    cache.cached_fit("toy", {}, lambda: torch.nn.Linear(2, 2), fit)  # make course, once
    monkeypatch.setenv("NMT_CLASSROOM", "1")
    # chapter 4b's live run
    cache.cached_fit("toy", {}, lambda: torch.nn.Linear(2, 2), fit, reuse=False)
    assert len(calls) == 1
    monkeypatch.setenv("NMT_CLASSROOM", "0")
    cache.cached_fit("toy", {}, lambda: torch.nn.Linear(2, 2), fit, reuse=False)
    assert len(calls) == 2


def test_cached_fit_retrains_on_a_corrupt_file(monkeypatch, tmp_path):
    import torch

    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path))
    fit = lambda model: {"seconds": 0.0}
    cache.cached_fit("toy", {}, lambda: torch.nn.Linear(2, 2), fit)
    (path,) = tmp_path.glob("toy-*.pt")
    path.write_bytes(path.read_bytes()[:50])  # truncated
    with pytest.warns(UserWarning, match="unusable cache file"):
        cache.cached_fit("toy", {}, lambda: torch.nn.Linear(2, 2), fit)
    # a model of another shape
    with pytest.warns(UserWarning, match="unusable cache file"):
        cache.cached_fit("toy", {}, lambda: torch.nn.Linear(2, 3), fit)


def test_atomic_save_writes_whole_files_with_the_umask_and_leaves_no_temporary(
    tmp_path,
):
    import os
    import torch

    old = os.umask(0o027)
    try:
        path = cache.atomic_save({"x": torch.ones(2)}, tmp_path / "deep" / "file.pt")
    finally:
        os.umask(old)
    assert torch.load(path, weights_only=True)["x"].tolist() == [1.0, 1.0]
    assert (path.stat().st_mode & 0o777) == 0o640  # 0o666 under the umask 027, not 0600
    assert [p.name for p in path.parent.iterdir()] == ["file.pt"]


def test_the_readme_and_the_guide_show_the_figures_of_the_executed_notebooks():
    import render_tables

    chapters = [
        render_tables.chapter(p)
        for p in sorted((render_tables.ROOT / "notebooks").glob("*.ipynb"))
    ]
    assert all(
        ch["executed"] and ch["mode"] == "learner" and ch["wall"] for ch in chapters
    ), (
        "every chapter is committed executed by tools/run_course.py --inplace, in"
        " learner mode"
    )
    stale = [name for name, (now, new) in render_tables.render().items() if now != new]
    assert stale == [], "run python tools/render_tables.py"


def test_a_chapter_split_over_two_sessions_counts_each_word_and_second_once():
    import render_tables

    plan = json.loads((render_tables.ROOT / "book" / "module_plan.json").read_text())[
        "ten_weeks"
    ]["sessions"]
    for split in [s for s in plan if s.get("until")]:
        path = next(
            (render_tables.ROOT / "notebooks").glob(f"{split['chapters'][0]}_*.ipynb")
        )
        first = render_tables.chapter_part(path, None, split["until"])
        second = render_tables.chapter_part(path, split["until"], None)
        whole = render_tables.chapter_part(path, None, None)
        assert first[0] > 0 and second[0] > 0 and first[0] + second[0] == whole[0]
        assert first[1] + second[1] == pytest.approx(whole[1])
    with pytest.raises(SystemExit, match="no section headed"):
        render_tables.chapter_part(path, "A section no chapter has", None)


def test_every_chapter_gives_its_decks_an_equation_slide_and_a_code_slide():
    import render_tables

    for path in sorted((render_tables.ROOT / "notebooks").glob("*.ipynb")):
        marked = [
            c
            for c in json.loads(path.read_text())["cells"]
            if c.get("metadata", {}).get("slideshow", {}).get("slide_type") == "slide"
        ]
        kinds = {(c["cell_type"], "$$" in "".join(c["source"])) for c in marked}
        assert (
            "markdown",
            True,
        ) in kinds, f"{path.name}: no equation marked as a slide"
        assert any(kind == "code" for kind, _ in kinds), (
            f"{path.name}: no code cell marked as a slide"
        )
