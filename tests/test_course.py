"""nmt_lib.course: quick mode, figure saving, headline numbers."""
import json

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from nmt_lib import course  # noqa: E402


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
