"""nmt_lib.base.course and nmt_lib.base.cache: quick mode, figure saving, headline
numbers, the model cache."""

import json
import os

import pytest
import torch

import render_tables
from nmt_lib.base import cache

CHAPTERS = sorted((render_tables.ROOT / "notebooks").glob("*.ipynb"))


def test_cached_fit_trains_once_then_loads_and_keys_by_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("NMT_QUICK", raising=False)
    calls = []

    build = lambda: torch.nn.Linear(3, 2)

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
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("NMT_QUICK", raising=False)
    calls, build = [], lambda: torch.nn.Linear(2, 2)
    fit = lambda model: calls.append(1) or {"seconds": 1.0}
    cache.cached_fit("toy", {}, build, fit)  # make course, once
    for classroom, trained in (("1", 1), ("0", 2)):  # then chapter 4b's live run
        monkeypatch.setenv("NMT_CLASSROOM", classroom)
        cache.cached_fit("toy", {}, build, fit, reuse=False)
        assert len(calls) == trained


def test_cached_fit_retrains_on_a_corrupt_file(monkeypatch, tmp_path):
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("NMT_QUICK", raising=False)
    calls = []
    fit = lambda model: calls.append(1) or {"seconds": 0.0}
    cache.cached_fit("toy", {}, lambda: torch.nn.Linear(2, 2), fit)
    (path,) = tmp_path.glob("toy-*.pt")
    path.write_bytes(path.read_bytes()[:50])  # truncated, then a model of another shape
    for trained, shape in ((2, (2, 2)), (3, (2, 3))):
        with pytest.warns(UserWarning):
            cache.cached_fit("toy", {}, lambda: torch.nn.Linear(*shape), fit)
        assert len(calls) == trained


def test_atomic_save_writes_whole_files_with_the_umask_and_leaves_no_temporary(
    tmp_path,
):
    old = os.umask(0o027)
    try:
        path = cache.atomic_save({"x": torch.ones(2)}, tmp_path / "deep" / "file.pt")
    finally:
        os.umask(old)
    assert torch.load(path, weights_only=True)["x"].tolist() == [1.0, 1.0]
    assert (path.stat().st_mode & 0o777) == 0o640  # 0o666 under the umask 027, not 0600
    assert [p.name for p in path.parent.iterdir()] == ["file.pt"]


def test_the_readme_and_the_guide_show_the_figures_of_the_executed_notebooks():
    chapters = [render_tables.chapter(p) for p in CHAPTERS]
    assert all(
        ch["executed"] and ch["mode"] == "learner" and ch["wall"] for ch in chapters
    ), (
        "every chapter is committed executed by tools/run_course.py --inplace, in"
        " learner mode"
    )
    stale = [name for name, (now, new) in render_tables.render().items() if now != new]
    assert stale == [], "run python tools/render_tables.py"


def test_a_chapter_split_over_two_sessions_counts_each_word_and_second_once():
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
    slide = lambda c: c["metadata"].get("slideshow", {}).get("slide_type") == "slide"
    for path in CHAPTERS:
        cells = json.loads(path.read_text())["cells"]
        kinds = {
            (c["cell_type"], "$$" in "".join(c["source"])) for c in cells if slide(c)
        }
        assert ("markdown", True) in kinds, (
            f"{path.name}: no equation marked as a slide"
        )
        assert "code" in dict(kinds), f"{path.name}: no code cell marked as a slide"
