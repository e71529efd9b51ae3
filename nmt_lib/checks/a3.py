"""The public graders of assignment 3, beating the chapters' recipe in a fixed budget,
graded from the runs handed in (`hand_in` writes them from the checkpoints): the rules
every run keeps (`check_runs`), the chosen setting's BLEU against the reference's, and
the ablation table. The teacher's hidden cases measure the test split, recompute the
table's figures and read its verdicts (`grading/a3.py`)."""

import functools
import re
from pathlib import Path

import torch

from nmt_lib.base.course import pick
from nmt_lib.checks.core import CheckFailed

# where a run's training files lie, beside the notebook: SETTING.seedS.pt, .log, .json
CHECKPOINTS = "runs/a3"
# what is handed in: a folder SETTING.seedS per run (its weights in half precision and
# its record, `hand_in`'s), and COMMANDS.md
RUNS = "hand-in"
HAND_IN_BYTES = 10_000_000  # the most a run's folder may hold: 10 MB
# seconds of training a run may have: ten minutes, and room for the last update
BUDGET = 630
REFERENCE = (
    "--max-pairs 40000 --min-freq 3 --d-model 128 --heads 4 --d-ff 512 --layers 2"
    " --dropout 0.1 --norm-first --label-smoothing 0.1 --warmup 100 --lr-factor 0.3"
    " --max-tokens 1000 --tokens-per-update 800 --epochs 1000 --time-limit 10 --threads"
    " 2 --device cpu"
)
# a run's settings that its seeds may differ in
FREE = ("seed", "time_limit", "checkpoint_every", "keep_last")
# The reference's BLEU over seeds 1 and 2 in the course's pilot, by machine kind: A3's
# model answer (solutions/assignments/A3_training.ipynb), greedy, max_len 30. A
# reference more than BAND below it was not trained as its command says. None in quick
# mode, whose short runs score far less.
PILOT = pick(
    {"AMD EPYC (AVX-512 BF16), 2 threads": {"valid": 48.89, "test": 45.31}}, {}
)
BAND = 3.0
# the ablation table's; a verdict is "real" when its interval leaves out 0
COLUMNS = ("valid BLEU", "minus reference", "low", "high", "verdict")
VERDICTS = ("real", "not shown")


def _named(paths, suffix: str = "") -> dict:
    """{(setting, seed): path} for each path named SETTING.seedS + `suffix`."""
    runs = {}
    for path in sorted(paths):
        if m := re.fullmatch(rf"([a-z0-9-]+)\.seed(\d+){re.escape(suffix)}", path.name):
            runs[m[1], int(m[2])] = path
    return runs


def find_runs(folder=RUNS) -> dict:
    """{(setting, seed): its folder} for each run handed in, SETTING.seedS/ in `folder`
    (none if it is missing)."""
    return _named(path for path in Path(folder).glob("*") if path.is_dir())


def hand_in(checkpoints=CHECKPOINTS, folder=RUNS) -> str:
    """Write the hand-in of each run SETTING.seedS.pt in `checkpoints` (over an older
    one): `folder`/SETTING.seedS/ with its weights in half precision and its record
    (settings, data, vocabularies, sittings), as a published model is exported, its
    log as its README.md; and COMMANDS.md. Nothing without checkpoints."""
    import shutil

    from nmt_lib.run.published import export_model

    runs = _named(Path(checkpoints).glob("*.pt"), ".pt")
    if not runs:
        return f"no checkpoints in {checkpoints}/: {folder}/ left as it is"
    for (name, seed), path in runs.items():
        log = path.with_suffix(".log")
        text = log.read_text(encoding="utf-8") if log.is_file() else "(no log)\n"
        card = f"# {name}.seed{seed}, assignment 3\n\nIts log:\n\n```\n{text}```\n"
        export_model(path, Path(folder) / f"{name}.seed{seed}", card=card)
    if (commands := Path(checkpoints) / "COMMANDS.md").is_file():
        shutil.copyfile(commands, Path(folder) / commands.name)
    size = sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file())
    return f"{len(runs)} runs handed in to {folder}/: {size / 1e6:.1f} MB in all"


@functools.cache
def _data():
    """`chapter_data()`, read once for the many checks of one grading."""
    from nmt_lib.recipes import chapter_data

    return chapter_data()


def _stamp(path) -> tuple:
    """When and how large a run's two files are: what the caches below are keyed by."""
    files = [Path(path) / f for f in ("model.safetensors", "settings.json")]
    return tuple((f.stat().st_mtime_ns, f.stat().st_size) for f in files)


@functools.lru_cache(maxsize=16)
def _checkpoint(path: str, stamp: tuple):
    from nmt_lib.run.published import load_published

    return load_published(path, device="cpu")


@functools.lru_cache(maxsize=64)
def _bleu(path: str, stamp: tuple, split: str):
    """A run's BLEU on `split`, measured once while its files are unchanged (the rules,
    the public and the hidden graders all ask for it)."""
    from nmt_lib.decoding import evaluate_bleu

    data, model = _data(), _checkpoint(path, stamp).model
    pairs = getattr(data.splits, split)
    return evaluate_bleu(model, pairs, data.src_vocab, data.tgt_vocab, max_len=30)


def _load(runs: dict) -> dict:
    """Each run handed in, read safely onto the CPU (once while its files are
    unchanged), as a `Checkpoint` whose payload is its record; a folder that is not one
    fails the check, named."""
    from nmt_lib.run.checkpoint import CheckpointError

    loaded = {}
    for key, path in runs.items():
        try:
            loaded[key] = _checkpoint(str(path), _stamp(path))
        except (CheckpointError, OSError) as e:
            raise CheckFailed(f"{path}: {e}") from None
    return loaded


def _settings(ckpt) -> dict:
    """What a run chose: its model, its parts and its training settings, less the ones
    seeds may differ in."""
    p = ckpt.payload
    return {
        "config": p["config"],
        "parts": p["parts"],
        "train": {k: v for k, v in p["train"].items() if k not in FREE},
    }


def reference_settings(vocab_sizes: tuple) -> dict:
    """The settings the reference command gives a run (the trainer's own parser reads
    it, `python -m speedrun.train`'s), for vocabularies of `vocab_sizes`."""
    from dataclasses import asdict

    from nmt_lib.run.cli import build_parser
    from nmt_lib.run.train_command import new_settings
    from nmt_lib.transformer import TransformerConfig
    from speedrun.train import SpeedrunSettings

    parser = build_parser(SpeedrunSettings)
    args = parser.parse_args(["train", "--out", "reference.pt", *REFERENCE.split()])
    train, model, _, parts = new_settings(args, parser, SpeedrunSettings)
    config = asdict(TransformerConfig(*vocab_sizes, **model))
    return {
        "config": config,
        "parts": asdict(parts),
        "train": {k: v for k, v in asdict(train).items() if k not in FREE},
    }


def data_settings() -> dict:
    """The data options a run must have: chapter 7's, as `chapter_data()` reads them."""
    from nmt_lib.base.course import quick

    return {
        **quick(dict(max_pairs=40_000, min_freq=3), max_pairs=6_000),
        "valid_frac": 0.05,
        "test_frac": 0.05,
        "seed": 0,
        "tokenizer": "word",
        "preprocess": "course",
        "exclude": None,
    }


def _refuse_other_data(run: str, ckpt, data, options: dict | None = None):
    """`CheckFailed` unless the run `run` has `data`'s vocabularies (and, given, the
    data `options`)."""
    if (
        options is not None
        and {k: ckpt.payload["data"].get(k) for k in options} != options
    ) or (
        (ckpt.src_vocab.idx_to_token, ckpt.tgt_vocab.idx_to_token)
        != (data.src_vocab.idx_to_token, data.tgt_vocab.idx_to_token)
    ):
        raise CheckFailed(
            f"{run} was trained on other data: use chapter 7's (--max-pairs 40000"
            " --min-freq 3, the split and tokens as they come)"
        )


def machine_kind(machine: str) -> str:
    """The kind of machine a sitting's record names: its CPU's maker and line (the
    first two words of its name, less (R), (TM) and a leading "11th Gen"), its widest
    vector unit and its threads; 'AMD EPYC (AVX-512 BF16), 2 threads' for 'AMD EPYC 9R14
    (AVX-512 BF16), 8 cores, 2 threads'. Its model and cores may differ."""
    m = re.fullmatch(r"(.*?)(?: \(([^()]*)\))?, \d+ cores, (\d+) threads", machine)
    if m is None:
        return machine
    name = re.sub(r"\((R|TM)\)|^\d+\w\w Gen ", "", m[1], flags=re.I).split()
    return f"{' '.join(name[:2])} ({m[2] or 'no AVX2'}), {m[3]} threads"


def check_runs(runs: dict, chosen) -> str:
    """The rules of assignment 3, for every run in `runs` (`find_runs`): a hand-in of at
    most 10 MB, at most `BUDGET` seconds of training, its sittings' included
    (`speedrun.train` records them), every sitting on the CPU with 2 threads and all on
    one kind of machine (`machine_kind`), its folder's seed, chapter 7's data and
    vocabularies, no two runs with the same weights; the reference with seeds 1 and 2,
    its command's settings and the whole budget used; `chosen` another setting with
    seeds 1 and 2 and one set of settings. Weights that are their seed's initial ones,
    or another seed's a little changed, are not runs."""

    if not runs:
        raise CheckFailed(
            f"no runs in {RUNS}/: train them first, with the commands above, and hand"
            " them in (`hand_in()`)"
        )
    from nmt_lib.run.checkpoint import model_from

    data, loaded, options = _data(), _load(runs), data_settings()
    kinds, weights, close = {}, {}, []
    flat = lambda model: torch.cat(
        [t.float().flatten() for t in model.state_dict().values()]
    )
    for (name, seed), ckpt in loaded.items():
        run, p = f"{name}.seed{seed}", ckpt.payload
        files = Path(runs[name, seed]).rglob("*")
        size = sum(f.stat().st_size for f in files if f.is_file())
        if size > HAND_IN_BYTES:
            raise CheckFailed(
                f"{run} is {size / 1e6:.1f} MB handed in: at most"
                f" {HAND_IN_BYTES / 1e6:.0f} MB a run (about 5 million parameters)"
            )
        if not (p.get("training") or {}).get("sessions"):
            raise CheckFailed(
                f"{run} does not say where it trained: train it with"
                " `python -m speedrun.train`, as the rules say"
            )
        training = p["training"]
        seconds = max(
            training["seconds"], sum(s["seconds"] for s in training["sessions"])
        )
        if seconds > BUDGET:
            raise CheckFailed(
                f"{run} trained {seconds:.0f} s: the budget is {BUDGET} s"
            )
        for session in training["sessions"]:
            if not re.search(r", \d+ cores, 2 threads$", session["machine"]):
                raise CheckFailed(
                    f"{run} trained a sitting on {session['machine']}: every sitting"
                    " runs on the CPU with --threads 2"
                )
            kinds.setdefault(machine_kind(session["machine"]), session["machine"])
        if p["train"]["seed"] != seed:
            raise CheckFailed(
                f"{run} was trained with --seed {p['train']['seed']}: name it by its"
                " seed"
            )
        _refuse_other_data(run, ckpt, data, options)
        # its seed's initial weights (the training command's), and the other seeds'
        torch.manual_seed(seed)
        mine, start = flat(ckpt.model), flat(model_from(p, runs[name, seed]))
        if (mine - start).norm() < 0.01 * start.norm():
            raise CheckFailed(
                f"{run} holds its seed's initial weights, hardly changed: it was not"
                " trained as its record says"
            )
        apart = {
            other: ((mine - theirs).norm() / theirs.norm()).item()
            for other, theirs in weights.items()
            if len(theirs) == len(mine)
        }
        # the same seed's runs can be close (a warm-down is its reference's until its
        # last minutes): named for the teacher to read
        close += [
            f"{run} {d:.2f} from {o}.seed{s}"
            for (o, s), d in apart.items()
            if s == seed and d < 0.1
        ]
        apart = {other: d for other, d in apart.items() if other[1] != seed}
        near = min(apart, key=apart.get, default=None)
        if near and apart[near] < 0.5:  # runs of other seeds: about 1.3 apart
            raise CheckFailed(
                f"{run} holds {near[0]}.seed{near[1]}'s weights, a little changed"
                f" ({apart[near]:.2f} apart; runs of other seeds are about 1.3 apart):"
                " hand in each run once"
            )
        weights[name, seed] = mine
    if len(kinds) > 1:
        raise CheckFailed(
            f"the runs were trained on {len(kinds)} kinds of machine"
            f" ({'; '.join(sorted(kinds.values()))}): train all of them on one kind,"
            " one maker's line of CPU with one vector unit"
        )
    sizes = (len(data.src_vocab), len(data.tgt_vocab))
    reference = reference_settings(sizes)
    for name, wanted in (("reference", reference), (chosen, None)):
        if not isinstance(name, str) or name == "reference" and wanted is None:
            raise CheckFailed(
                f"`chosen` is {name!r}: name the setting you chose, as its runs are"
                " named"
            )
        seeds = {
            seed: ckpt for (setting, seed), ckpt in loaded.items() if setting == name
        }
        if not {1, 2} <= set(seeds):
            raise CheckFailed(
                f"{name} needs runs with seeds 1 and 2; {RUNS}/ has "
                f"{', '.join(f'seed {s}' for s in sorted(seeds)) or 'none'}"
            )
        for seed in (1, 2):
            found = _settings(seeds[seed])
            wanted = wanted or found
            if found != wanted:
                part = next(k for k in found if found[k] != wanted[k])
                changed = sorted(
                    k for k in found[part] if found[part][k] != wanted[part].get(k)
                )
                raise CheckFailed(
                    f"{name}.seed{seed}: its {part} settings {', '.join(changed)}"
                    " differ from "
                    + (
                        "the reference command's"
                        if name == "reference"
                        else "its seed 1's"
                    )
                )
            trained = seeds[seed].payload["training"]["seconds"]
            if name == "reference" and trained < pick(BUDGET - 60, 0):
                raise CheckFailed(
                    f"reference.seed{seed} trained {trained:.0f} s: the reference has"
                    " the whole ten minutes"
                )
        if name != "reference" and wanted == reference:
            raise CheckFailed(
                f"{name} has the reference's settings: choose a setting that changes"
                " something"
            )
    read = f"; to read: {', '.join(close)} (same seed)" if close else ""
    return f"{len(runs)} runs, each within the rules{read}"


def runs_bleu(runs: dict, split: str) -> dict:
    """{(setting, seed): `BleuResult`} of each run handed in on `split` of
    `chapter_data()`: greedy, max_len 30, as chapter 7 measures it."""
    data, loaded = _data(), _load(runs)
    for (name, seed), ckpt in loaded.items():
        _refuse_other_data(f"{name}.seed{seed}", ckpt, data)
    return {key: _bleu(str(runs[key]), _stamp(runs[key]), split) for key in loaded}


def check_beats_reference(runs: dict, chosen, split: str = "valid") -> str:
    """The runs keep the rules (`check_runs`), the reference scores what the course's
    pilot did on its kind of machine (`PILOT`, less `BAND`), and `chosen`'s mean BLEU
    over seeds 1 and 2 on `split` is above the reference's."""
    read = check_runs(runs, chosen).partition("; to read:")[1:]
    picked = {
        key: path
        for key, path in runs.items()
        if key[0] in ("reference", chosen) and key[1] in (1, 2)
    }
    bleu = {key: r.bleu for key, r in runs_bleu(picked, split).items()}
    mine, base = ((bleu[name, 1] + bleu[name, 2]) / 2 for name in (chosen, "reference"))
    machine = _load(picked)["reference", 1].payload["training"]["sessions"][0]
    pilot = PILOT.get(machine_kind(machine["machine"]), {}).get(split)
    if pilot is not None and base < pilot - BAND:
        raise CheckFailed(
            f"the reference: {split} BLEU {base:.2f} over seeds 1 and 2, where the"
            f" course's pilot reached {pilot:.2f} on this kind of machine: train it as"
            " its command says, for the whole ten minutes"
        )
    if not mine > base:
        raise CheckFailed(
            f"{chosen}: {split} BLEU {mine:.2f} over seeds 1 and 2, not above the"
            f" reference's ({base:.2f})"
        )
    return (
        f"{chosen}: {split} BLEU {mine:.2f} over seeds 1 and 2, {mine - base:+.2f}"
        " against the reference" + "".join(read)
    )


def check_ablation(table, chosen) -> str:
    """`table`: a pandas DataFrame indexed by (setting, seed), one row per run other
    than the reference's: at least 3 settings, `chosen` among them with seeds 1 and 2,
    and the columns `COLUMNS`: validation BLEU, its difference to the reference run of
    the same seed, the 95% paired-bootstrap interval of that difference (chapter 4a),
    and a verdict, one of `VERDICTS` (whether it is right is the hidden test's)."""
    import pandas as pd

    if not isinstance(table, pd.DataFrame):
        raise CheckFailed(
            f"`ablation` should be a pandas DataFrame, got {type(table).__name__}"
        )
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise CheckFailed(
            f"`ablation` lacks the columns {', '.join(missing)}; it needs"
            f" {', '.join(COLUMNS)}"
        )
    if table.index.nlevels != 2 or table.index.duplicated().any():
        raise CheckFailed(
            "`ablation` should have one row per run, indexed by (setting, seed)"
        )
    settings = set(table.index.get_level_values(0)) - {"reference"}
    if len(settings) < 3:
        raise CheckFailed(
            f"`ablation` has {len(settings)} settings besides the reference; compare at"
            " least 3"
        )
    if not {(chosen, 1), (chosen, 2)} <= set(table.index):
        raise CheckFailed(
            f"`ablation` needs the rows ({chosen!r}, 1) and ({chosen!r}, 2), the chosen"
            " setting's two seeds"
        )
    values = table[list(COLUMNS[:4])].astype(float)
    if not torch.isfinite(torch.tensor(values.to_numpy())).all():
        raise CheckFailed("`ablation` has a missing or infinite number")
    for name, row in values.iterrows():
        if not row["low"] <= row["minus reference"] <= row["high"]:
            raise CheckFailed(
                f"`ablation`, row {name}: the difference {row['minus reference']:+.1f}"
                f" lies outside its interval ({row['low']:+.1f} to {row['high']:+.1f})"
            )
    for name, verdict in table["verdict"].items():
        if not isinstance(verdict, str) or verdict not in VERDICTS:
            raise CheckFailed(
                f"`ablation`, row {name}: the verdict is {verdict!r}; write"
                f" {VERDICTS[0]!r} or {VERDICTS[1]!r}"
            )
    return (
        f"{len(settings)} settings, each run with its interval against the reference of"
        " its seed, and a verdict"
    )
