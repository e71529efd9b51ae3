"""nmt_lib.base.course and nmt_lib.base.cache: quick mode, figure saving, headline numbers, the model cache."""
import json

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from nmt_lib.base import cache, course  # noqa: E402


@pytest.mark.parametrize("value, quick", [("1", True), ("yes", True), ("0", False), ("", False), ("false", False)])
def test_quick_mode_and_pick(monkeypatch, value, quick):
    monkeypatch.setenv("NMT_QUICK", value)
    assert course.quick_mode() is quick
    assert course.pick("learner", "quick") == ("quick" if quick else "learner")


def test_save_figure_only_with_a_folder(monkeypatch, tmp_path):
    fig, ax = plt.subplots()
    monkeypatch.delenv("NMT_FIG_DIR", raising=False)
    assert course.save_figure(fig, "plot") is None
    monkeypatch.setenv("NMT_FIG_DIR", str(tmp_path / "figs"))
    path = course.save_figure(fig, "plot")
    assert path == tmp_path / "figs" / "plot.png" and path.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="plain file stem"):
        course.save_figure(fig, "../escape")
    plt.close(fig)


def test_headline_appends_json_lines(monkeypatch, tmp_path):
    target = tmp_path / "h.jsonl"
    monkeypatch.setenv("NMT_HEADLINES", str(target))
    assert course.headline("bleu", 31.234567) == 31.234567
    course.headline("pairs", 12)
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    assert rows == [{"name": "bleu", "value": 31.2346}, {"name": "pairs", "value": 12}]


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


def test_setting_carries_its_default_and_help_into_the_dataclass():
    from dataclasses import dataclass, fields

    @dataclass
    class Toy:
        width: int = course.setting(8, "how wide", aliases=["--w"])

    (f,) = fields(Toy)
    assert Toy().width == 8 and f.metadata["help"] == "how wide" and f.metadata["aliases"] == ["--w"]


def test_the_readme_and_the_guide_show_the_figures_of_the_executed_notebooks():
    import render_tables

    chapters = [render_tables.chapter(p) for p in sorted((render_tables.ROOT / "notebooks").glob("*.ipynb"))]
    assert all(ch["executed"] and ch["mode"] == "learner" and ch["wall"] for ch in chapters), \
        "every chapter is committed executed by tools/run_course.py --inplace, in learner mode"
    stale = [name for name, (now, new) in render_tables.render().items() if now != new]
    assert stale == [], "run python tools/render_tables.py"


def copy_sources(root, tmp_path):
    """The notebooks, the solutions, the records and every page with rendered tables, under tmp_path."""
    import shutil

    for folder in ("notebooks", "solutions", "solutions/assignments", "records", "bench/results", "book"):
        (tmp_path / folder).mkdir(parents=True)
    for pattern in ("notebooks/*.ipynb", "solutions/*.ipynb", "solutions/assignments/*.ipynb", "records/*.json", "bench/results/latest.json", "book/*.md", "book/*.json",
                    "README.md"):
        for path in root.glob(pattern):
            shutil.copy(path, tmp_path / path.relative_to(root))


def test_a_quoted_figure_that_its_notebook_or_record_does_not_show_is_caught(tmp_path):
    import render_tables

    copy_sources(render_tables.ROOT, tmp_path)
    assert all(now == new for now, new in render_tables.render(tmp_path).values())

    def headlines(nb):
        return nb["metadata"]["nmt_course"]["headlines"]

    changes = [  # (file, how its figure changes, the pages that must notice)
        ("notebooks/07_transformer.ipynb", lambda nb: headlines(nb)[0].update(value=headlines(nb)[0]["value"] + 1.0),
         {"README.md", "book/results.md"}),                                             # a headline
        ("notebooks/08_evaluation.ipynb", lambda nb: headlines(nb)[-1]["rows"][0].__setitem__(1, 99.9),
         {"README.md", "book/results.md"}),                                             # a table's cell
        ("records/published-subwords.json", lambda r: r["evaluations"][-1].update(sacrebleu=12.3),
         {"README.md", "book/results.md"}),                                             # a published score
        ("records/ablation-subwords.json", lambda r: r["rows"][0].__setitem__(2, "1.0"), {"book/results.md"}),
        ("bench/results/latest.json", lambda r: r["training"].update(ratio_train_vs_d2l=0.5), {"book/benchmarks.md"}),
        ("records/soak.json", lambda r: r["sigkill"].update(kills=7), {"book/command-line.md"}),
        ("records/tatoeba-test-beam4.json", lambda r: r.update(sacrebleu=12.3),
         {"README.md", "book/results.md"}),                                             # the public test
        ("records/tatoeba-test-greedy.json", lambda r: r["data"]["excluded"].update(train=5),
         {"README.md", "book/results.md"}),                                             # the overlap left out
        ("records/tatoeba-others.json", lambda r: r["rows"][0].update(sacrebleu=12.3),
         {"README.md", "book/results.md"}),                                             # others' scores
        ("records/recipe-tatoeba.json", lambda r: r["rows"][0].update(valid_bleu=12.3),
         {"README.md", "book/results.md"}),
        ("records/recipe-tatoeba.json", lambda r: r["limits"].update(repeated_english=7), {"README.md"}),
    ]
    for name, change, pages in changes:
        path = tmp_path / name
        before = path.read_text()
        data = json.loads(before)
        change(data)                                            # the source now holds another figure
        path.write_text(json.dumps(data))
        changed = {page for page, (now, new) in render_tables.render(tmp_path).items() if now != new}
        assert changed == pages, name
        path.write_text(before)


def test_a_missing_record_or_chapter_line_is_a_one_line_error(tmp_path):
    import render_tables

    copy_sources(render_tables.ROOT, tmp_path)
    (tmp_path / "records" / "soak.json").unlink()
    with pytest.raises(SystemExit, match="records/soak.json is missing"):
        render_tables.render(tmp_path)
    (tmp_path / "records" / "soak.json").write_text((render_tables.ROOT / "records" / "soak.json").read_text())
    path = tmp_path / "notebooks" / "06_positional.ipynb"
    path.write_text(path.read_text().replace("**In this chapter:**", "In this chapter:"))
    with pytest.raises(SystemExit, match="06_positional.ipynb has no '\\*\\*In this chapter:\\*\\* ...' line"):
        render_tables.render(tmp_path)


def test_record_table_keeps_the_columns_in_order_and_whole_numbers_whole(monkeypatch, tmp_path):
    import pandas as pd

    monkeypatch.setenv(course.HEADLINE_ENV, str(tmp_path / "h.jsonl"))
    table = pd.DataFrame({"test BLEU": [11.02, 28.7], "parameters": [1635159, 2313559]}, index=["GRU", "Transformer"])
    assert course.record_table("results", table) is table
    recorded = json.loads((tmp_path / "h.jsonl").read_text())
    assert recorded == {"name": "results", "columns": ["test BLEU", "parameters"],
                        "rows": [["GRU", 11.02, 1635159], ["Transformer", 28.7, 2313559]]}
    assert all(type(v) is int for _, _, v in recorded["rows"])
