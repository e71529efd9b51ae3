"""nmt_lib.base.course and nmt_lib.base.cache: quick mode, figure saving, headline
numbers, the model cache."""

import json
import os
import re

import pytest
import torch

import module_plan
import render_tables
import slides
from nmt_lib.base import cache

CHAPTERS = sorted((render_tables.ROOT / "notebooks").glob("*.ipynb"))
PLAN = json.loads((render_tables.ROOT / "book" / "module_plan.json").read_text())


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


def test_a_chapter_split_over_two_sessions_counts_each_word_line_and_second_once():
    for cut in [s for s in PLAN["ten_weeks"]["sessions"] if s.get("until")]:
        path = next(p for p in CHAPTERS if p.stem.split("_")[0] == cut["chapters"][-1])
        first = module_plan.chapter_part(path, None, cut["until"])
        second = module_plan.chapter_part(path, cut["until"], None)
        whole = module_plan.chapter_part(path, None, None)
        assert first[0] > 0 and second[0] > 0
        assert [a + b for a, b in zip(first, second)] == pytest.approx(whole)
    with pytest.raises(SystemExit, match="no section headed"):
        module_plan.chapter_part(path, "A section no chapter has", None)
    with pytest.raises(SystemExit, match="which has none such"):
        module_plan.exercise_seconds(module_plan.ROOT, "01", [9])


def test_each_deck_shows_its_session_week_and_assignments_as_the_ten_week_plan_has():
    number = 0  # the decks come in the plan's order, the index last
    for row, deck in zip(PLAN["ten_weeks"]["sessions"], slides.decks().values()):
        number += not row.get("optional")
        label = "Optional session" if row.get("optional") else f"Session {number}"
        assert f'class="when">{label}, week {row["week"]}<' in deck, row["lecture"]
        said = dict(re.findall(r'<p class="(due|released)">([^<]*)<', deck))
        for side in ("due", "released"):
            assert re.findall(r"\bA\d\b", said.get(side, "")) == row.get(side, []), side
