"""Assignment 3: its runs checked against the rules, and graded from the hand-ins;
apart from the other assignments' tests, so that a test worker takes them alongside."""

import json
import re
import sys

import pytest
import torch

from conftest import ROOT, write_notebook

sys.path.insert(0, str(ROOT))  # grading/ is a folder of the repository, not a package
from grading.hidden import grade  # noqa: E402

ANSWERS = ROOT / "solutions" / "assignments"


@pytest.fixture(scope="module")
def a3_runs(tmp_path_factory):
    """A made-up hand-in for assignment 3 (`hand_in`'s), on quick mode's data, trained
    by update count so that its verdicts hold on any machine: the reference (50 updates)
    and a setting with three times as many, each seed trained, on one thread and a
    quicker warm-up, then recorded with the command's settings and 2 threads (the rules
    read the records); and settings whose weights are the reference's drowned in noise
    (they cannot beat it)."""
    from nmt_lib.checks.a3 import REFERENCE, RUNS, hand_in
    from speedrun.train import main as train

    folder = tmp_path_factory.mktemp("a3") / "runs" / "a3"
    trained = folder.parent / "trained"
    folder.mkdir(parents=True)
    options = REFERENCE.replace("40000", "6000").replace("threads 2", "threads 1")
    options = options.split() + ["--progress", "none"]
    quicker = ["--warmup", "30", "--lr-factor", "0.5"]
    for name, steps in (("reference", "50"), ("longer", "150")):
        for seed in ("1", "2"):
            out = trained / f"{name}.seed{seed}.pt"
            more = [*quicker, "--seed", seed, "--max-steps", steps]
            assert train(["--out", str(out), *options, *more]) == 0
    recorded = dict(warmup=100, lr_factor=0.3, max_steps=None)
    for i, (name, source, setting, noise) in enumerate(
        (
            ("reference", "reference", {}, 0),
            ("longer", "longer", {"warmup": 40}, 0),
            ("clip", "reference", {"clip": 0.5}, 1.0),
            ("smooth", "reference", {"label_smoothing": 0.2}, 1.0),
        )
    ):
        for seed in (1, 2):
            payload = torch.load(trained / f"{source}.seed{seed}.pt", weights_only=True)
            payload["train"].update(recorded, **setting, seed=seed)
            for sitting in payload["progress"]["sessions"]:
                sitting["machine"] = sitting["machine"].replace("1 thr", "2 thr")
            gen = torch.Generator().manual_seed(10 * i + seed)
            for value in payload["state_dict"].values():
                if value.is_floating_point():
                    value.add_(noise * torch.randn(value.shape, generator=gen))
            torch.save(payload, folder / f"{name}.seed{seed}.pt")
    assert hand_in(folder, folder.parent.parent / RUNS).startswith("8 runs handed in")
    return folder.parent.parent / RUNS


def edited(folder, tmp_path, name, change):
    """A copy of the hand-in `folder` with `change(record)` applied to run `name`'s
    record, given its folder as "path"."""
    import shutil

    shutil.copytree(folder, tmp_path / folder.name)
    record = json.loads((tmp_path / folder.name / name / "settings.json").read_text())
    change(dict(record, path=tmp_path / folder.name / name))
    (tmp_path / folder.name / name / "settings.json").write_text(json.dumps(record))
    return tmp_path / folder.name


def noisy(other: str):
    """A run's weights made `other`'s, each changed by about 1 %."""

    def change(record):
        from safetensors.torch import load_file, save_file

        weights = load_file(record["path"].parent / other / "model.safetensors")
        gen = torch.Generator().manual_seed(0)
        for value in weights.values():
            value.mul_(1 + 0.01 * torch.randn(value.shape, generator=gen))
        save_file(weights, record["path"] / "model.safetensors")

    return change


def initial(record):
    """A run's weights made its seed's initial ones, as the training command makes
    them, in half precision; the record left as it was."""
    from safetensors.torch import save_file
    from nmt_lib.run.checkpoint import model_from

    torch.manual_seed(record["train"]["seed"])
    model = model_from(record, record["path"])
    weights = {k: v.detach().half().contiguous() for k, v in model.state_dict().items()}
    save_file(weights, record["path"] / "model.safetensors")


def sitting(machine: str):
    return lambda record: record["training"]["sessions"][0].update(machine=machine)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, change, says",
    [
        (
            "longer.seed2",
            lambda p: p["training"].update(seconds=700.0),
            "longer.seed2 trained 700 s: the budget is 630 s",
        ),
        (
            "clip.seed1",
            sitting("Intel Xeon, 8 cores, 2 threads"),
            "the runs were trained on 2 kinds of machine",
        ),
        (  # a hosted session moved, or a lab machine: another model and core count
            "longer.seed1",
            lambda p: (s := p["training"]["sessions"][0]).update(
                machine=re.sub(r"^(\S+ \S+)(.*?), \d+", r"\1 7B13\2, 64", s["machine"])
            ),
            None,
        ),
        (
            "smooth.seed2",
            lambda p: (p["path"] / "README.md").write_text("-" * 10**7),
            "smooth.seed2 is 12.5 MB handed in: at most 10 MB a run",
        ),
        (
            "reference.seed2",
            sitting("AMD EPYC, 2 cores, 8 threads"),
            "every sitting runs on the CPU with --threads 2",
        ),
        (
            "smooth.seed2",
            lambda p: p["training"].pop("sessions"),
            "smooth.seed2 does not say where it trained",
        ),
        (
            "reference.seed2",
            lambda p: p["train"].update(lr_factor=0.5),
            "reference.seed2: its train settings lr_factor differ from the reference",
        ),
        (
            "longer.seed2",
            lambda p: p["config"].update(dropout=0.0),
            "longer.seed2: its config settings dropout differ from its seed 1's",
        ),
        (
            "smooth.seed1",
            lambda p: p["tgt_vocab"].reverse(),
            "smooth.seed1 was trained on other data",
        ),
        (
            "smooth.seed1",
            lambda p: p["data"].update(test_frac=0.01),
            "smooth.seed1 was trained on other data",
        ),
        (
            "clip.seed2",
            lambda p: p["train"].update(seed=1),
            "clip.seed2 was trained with --seed 1",
        ),
        (
            "clip.seed2",
            lambda p: (p["path"] / "model.safetensors").write_bytes(
                (p["path"].parent / "clip.seed1" / "model.safetensors").read_bytes()
            ),
            "clip.seed2 holds clip.seed1's weights, a little changed (0.00 apart",
        ),
        ("longer.seed2", noisy("longer.seed1"), "longer.seed2 holds longer.seed1's"),
        (
            "reference.seed1",
            initial,
            "reference.seed1 holds its seed's initial weights, hardly changed",
        ),
        (
            "longer.seed2",
            lambda p: p["training"].update(
                sessions=[dict(seconds=300), dict(seconds=350)]
            ),
            "longer.seed2 trained 650 s",
        ),
    ],
)
def test_assignment_3_s_runs_are_checked_against_its_rules(
    a3_runs, tmp_path, name, change, says
):
    from contextlib import nullcontext
    from nmt_lib.checks import CheckFailed, check_runs
    from nmt_lib.checks.a3 import find_runs

    runs = find_runs(edited(a3_runs, tmp_path, name, change))
    with pytest.raises(CheckFailed, match=re.escape(says)) if says else nullcontext():
        assert check_runs(runs, "longer").startswith("8 runs, each within the rules")


@pytest.mark.slow
def test_a_run_made_from_another_setting_s_run_of_its_seed_is_named_to_read(
    a3_runs, tmp_path
):
    from nmt_lib.checks import check_runs
    from nmt_lib.checks.a3 import find_runs

    runs = find_runs(edited(a3_runs, tmp_path, "clip.seed1", noisy("reference.seed1")))
    said = check_runs(runs, "longer")
    named = re.search(r"to read: (\S+) 0\.01 from (\S+) \(same seed\)", said)
    assert {*named.groups()} == {"clip.seed1", "reference.seed1"}, said


@pytest.mark.slow
def test_assignment_3_is_graded_from_the_hand_ins_and_a_wrong_figure_or_verdict_found(
    a3_runs, tmp_path
):
    import numpy as np
    import pandas as pd
    from nmt_lib.checks.a3 import find_runs, runs_bleu
    from nmt_lib.metrics import paired_bootstrap

    valid = runs_bleu(runs := find_runs(a3_runs), "valid")

    def row(name, seed):
        mine, base = valid[name, seed], valid["reference", seed]
        a, b = paired_bootstrap(mine.counts(), base.counts())
        low, high = np.percentile(a - b, [2.5, 97.5])
        verdict = "real" if low > 0 or high < 0 else "not shown"
        return [mine.bleu, mine.bleu - base.bleu, low, high, verdict]

    keys = [key for key in runs if key[0] != "reference"]
    table = pd.DataFrame(
        [row(*key) for key in keys],
        index=pd.MultiIndex.from_tuples(keys, names=["setting", "seed"]),
        columns=["valid BLEU", "minus reference", "low", "high", "verdict"],
    )
    answers = {"chosen": "longer", "ablation": table, "my_answers": {}}
    assert [r["points"] for r in grade("A3", answers, runs)[:2]] == [10, 20]
    # the same table over runs that break the rules: nothing
    over = lambda p: p["training"].update(seconds=700.0)
    broken = find_runs(edited(a3_runs, tmp_path, "longer.seed2", over))
    assert [r["points"] for r in grade("A3", answers, broken)[:2]] == [0, 0]
    typed, misread = table.copy(), table.copy()
    typed.loc[("longer", 2), ["low", "high"]] = [-50.0, 50.0]
    misread["verdict"] = np.where(table["verdict"] == "real", "not shown", "real")
    for task, wrong, says in (  # the table's figures, or the chosen setting: nothing
        (1, {"ablation": typed}, "row ('longer', 2): low is -50.00, but its run"),
        (1, {"ablation": misread}, "row ('clip', 1): the verdict"),
        (0, {"chosen": "clip"}, "clip: valid BLEU"),
    ):
        row = grade("A3", {**answers, **wrong}, runs)[task]
        assert row["points"] == 0 and says in row["messages"][task], row


@pytest.mark.slow
def test_a3_answers_cross_the_sandbox_as_plain_data_and_its_template_scores_nothing(
    a3_runs,
):
    """The model answer's two tasks, choosing `longer`, handed in with the runs beside
    the notebook: its `chosen` and its table come back from the sandbox and score full
    marks; the template scores nothing."""
    import shutil
    from grading.hidden import grade_in_sandbox
    from grading.sandbox import Sandbox

    answer = json.loads((ANSWERS / "A3_training.ipynb").read_text())
    code = [
        "".join(c["source"])
        for c in answer["cells"]
        if c["cell_type"] == "code"
        and "teacher-only" not in c["metadata"].get("tags", [])
    ]
    code = [c.replace('"warmdown"', '"longer"') for c in code if "%matplotlib" not in c]
    folder = a3_runs.parent
    for name, cells in (("mine.ipynb", code), ("template.ipynb", None)):
        notebook = folder / name
        if cells is None:
            shutil.copy(ROOT / "assignments" / "A3_training.ipynb", notebook)
        else:
            write_notebook(notebook, *cells)
        with Sandbox("A3", notebook, timeout=120, carry=(a3_runs.name,)) as box:
            rows = grade_in_sandbox("A3", box)
        points = [r["points"] for r in rows[:2]]
        assert points == ([10, 20] if cells else [0, 0]), rows


@pytest.mark.slow
def test_a_reference_far_below_the_pilot_s_on_its_kind_of_machine_is_not_beaten(
    a3_runs, monkeypatch
):
    """A sandbagged reference, its record edited to look whole, scores far below what
    the course's pilot reached on the machine kind its record names."""
    import nmt_lib.checks.a3 as a3

    runs = a3.find_runs(a3_runs)
    record = json.loads((a3_runs / "reference.seed1" / "settings.json").read_text())
    kind = a3.machine_kind(record["training"]["sessions"][0]["machine"])
    assert a3.check_beats_reference(runs, "longer").startswith("longer: valid BLEU")
    monkeypatch.setitem(a3.PILOT, kind, {"valid": 99.0})  # these runs: a few BLEU
    with pytest.raises(a3.CheckFailed, match="where the course's pilot reached 99.00"):
        a3.check_beats_reference(runs, "longer")
