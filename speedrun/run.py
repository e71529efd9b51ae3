#!/usr/bin/env python3
"""The two-core translation speedrun (book/speedrun.md): train a translator within a
time budget on two CPU cores, score it on the public Tatoeba test, keep the run's
record, and render the record table.

    # one record
    python speedrun/run.py quick NAME "what it changes" --on BASE -- TRAIN OPTIONS ...
    # go on after a stop, for the minutes the checkpoint has left
    python speedrun/run.py main NAME "what it changes" --on BASE --resume -- TRAIN ...
    # records/speedrun.json from speedrun/records/
    python speedrun/run.py --table

A run is `python speedrun/train.py --exclude tatoeba --time-limit BUDGET --threads 2`
with the options given; then beam 4's length penalty is chosen among ALPHAS on 1,000
validation sentences, and the test is translated greedily and with beam 4. The record
keeps each test sentence's BLEU counts, for the gain over the record it builds on.
"""

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nmt_lib.run.records import RECORDS, bleu_interval, write_record  # noqa: E402

TRACKS = {"quick": 30, "main": 180}  # minutes of training on two CPU cores
ALPHAS = (0.6, 1.0, 1.4)  # length penalties tried for beam 4 on the validation split
HERE = Path(__file__).resolve().parent
RUNS = ROOT / "runs" / "speedrun"


def sentence_counts(hypotheses, references) -> list[str]:
    """Each test sentence's BLEU counts as a string of numbers: a line a sentence."""
    from nmt_lib.run.inference import sacrebleu_counts

    return [
        " ".join(map(str, counts))
        for counts in sacrebleu_counts(hypotheses, references)
    ]


def counts_of(record: dict) -> list[list[int]]:
    return [[int(n) for n in line.split()] for line in record["counts_beam4"]]


def read_records(track: str | None = None) -> list[dict]:
    """The records of speedrun/records/ (one track's, if named), in the order made."""
    files = (HERE / "records").glob("*.json")
    records = sorted(
        (json.loads(p.read_text(encoding="utf-8")) for p in files),
        key=lambda r: (list(TRACKS).index(r["track"]), r["recorded"]),
    )
    return [r for r in records if track in (None, r["track"])]


def training(r: dict) -> str:
    """What a record's training took, as its table shows it."""
    return (
        f"{r['training_minutes']:.1f} min, {r['updates']:,} updates,"
        f" {r['parameters'] / 1e6:.1f} M parameters"
    )


def gain(mine: dict, theirs: dict) -> str:
    """`mine`'s beam-4 score less `theirs`', with its 95% interval."""
    low, high = bleu_interval(counts_of(mine), counts_of(theirs))
    gained = mine["beam4"]["sacrebleu"] - theirs["beam4"]["sacrebleu"]
    return f"{gained:+.2f} ({low:+.2f} to {high:+.2f})"


def run(
    track: str,
    name: str,
    change: str,
    on: str | None,
    options: list[str],
    *,
    resume: bool = False,
    average: int = 1,
) -> Path:
    """Train, score and write the record; `resume` goes on with the run's checkpoint for
    the budget left; `average` > 1 scores the mean of the final weights and the last
    `average` - 1 epoch ends (kept by --keep-last)."""
    import torch

    from nmt_lib.run.average import average_checkpoints, kept_epochs
    from speedrun.train import ema_checkpoint
    from nmt_lib.run.checkpoint import load_checkpoint, read_payload
    from nmt_lib.run.corpus import ParallelCorpus
    from nmt_lib.run.inference import evaluate_checkpoint, evaluate_public

    out, log = RUNS / f"{track}-{name}.pt", RUNS / f"{track}-{name}.log"
    if on is not None and not (HERE / "records" / f"{track}-{on}.json").is_file():
        raise SystemExit(
            f"speedrun: --on {on}: there is no record"
            f" speedrun/records/{track}-{on}.json"
        )
    if average > 1 and any(o.split("=")[0] == "--ema" for o in options):
        raise SystemExit(
            "speedrun: --average and --ema: score the mean of epoch ends or the moving"
            " average, not both"
        )
    if out.exists() != resume:
        raise SystemExit(
            f"speedrun: {out} exists; pass --resume to go on with its run, or move it"
            " away to run again"
            if out.exists()
            else f"speedrun: --resume: there is no {out} to go on with"
        )
    where = ["--out", str(out.relative_to(ROOT))]
    base = ["speedrun/train.py", *where, "--threads", "2", "--progress", "lines"]
    train = [*base, "--exclude", "tatoeba", "--time-limit", str(TRACKS[track])]
    train += options
    command = train
    if resume:
        progress = read_payload(out, "cpu")["progress"]
        left = TRACKS[track] - progress["seconds"] / 60
        command = (
            None
            if progress["stopped"] == "time_limit"
            else [*base, "--resume", "--time-limit", f"{left:.2f}"]
        )
    RUNS.mkdir(parents=True, exist_ok=True)
    if command is not None:
        with open(log, "a" if resume else "w") as err:
            trained = subprocess.run([sys.executable, *command], cwd=ROOT, stderr=err)
        if trained.returncode != 0:
            raise SystemExit(
                f"speedrun: training stopped or failed; see {log}, and go on with"
                " --resume"
            )
    scored = out
    # trained with --ema: the model is it
    if average == 1 and read_payload(out, "cpu").get("ema") is not None:
        scored = ema_checkpoint(out, RUNS / f"{track}-{name}.ema.pt")
    elif average > 1:
        kept = [p for _, p in sorted(kept_epochs(out).items()) if not p.samefile(out)][
            -(average - 1) :
        ]
        if len(kept) < average - 1:
            raise SystemExit(
                f"speedrun: --average {average} needs {average - 1} epoch ends kept"
                f" beside {out}, found {len(kept)}: train with --keep-last"
                f" {average - 1} or more, or average fewer"
            )
        scored = average_checkpoints([*kept, out], RUNS / f"{track}-{name}.mean.pt")
    torch.set_num_threads(2)
    ckpt = load_checkpoint(scored, device="cpu")
    corpus = ParallelCorpus.from_settings(
        ckpt.payload["data"], vocabularies=(ckpt.src_vocab, ckpt.tgt_vocab)
    )
    valid = {
        a: evaluate_checkpoint(
            ckpt, split="valid", beam=4, alpha=a, limit=1000, corpus=corpus
        ).sacrebleu
        for a in ALPHAS
    }
    alpha = max(valid, key=valid.get)
    greedy, beam = evaluate_public(ckpt), evaluate_public(ckpt, beam=4, alpha=alpha)
    progress = ckpt.payload["progress"]
    again = ["python", "speedrun/run.py", track, name, change]
    again += ["--on", on] if on else []
    again += ["--average", str(average)] if average > 1 else []
    record = {
        "kind": "speedrun",
        "track": track,
        "name": name,
        "change": change,
        "on": on,
        "command": shlex.join([*again, "--", *options]),
        "train_command": shlex.join(["python", *train]),
        "budget_minutes": TRACKS[track],
        "training_minutes": progress["seconds"] / 60,
        "sessions": progress["sessions"],
        "updates": progress["step"],
        "averaged": ckpt.payload.get("averaged"),
        "parameters": ckpt.parameters,
        "config": ckpt.payload["config"],
        "parts": ckpt.payload.get("parts"),
        "valid_beam4_by_alpha": valid,
        "alpha": alpha,
        "signature": beam.signature,
        **{
            search: {"sacrebleu": r.sacrebleu, "chrf": r.chrf}
            for search, r in (("greedy", greedy), ("beam4", beam))
        },
        "counts_beam4": sentence_counts(beam.hypotheses, beam.reference_lines),
    }
    return write_record(HERE / "records" / f"{track}-{name}.json", record)


def write_table(path: Path, table: dict) -> Path:
    """`write_record`, unless the file holds this table already."""
    held = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    stamps = ("recorded", "machine")
    if {k: v for k, v in held.items() if k not in stamps} == table:
        return path
    return write_record(path, table)


def table() -> Path:
    """records/speedrun.json, a row per record in the order made, and the README's
    records/speedrun-best.json: each track's best beam-4 record, without its command."""
    records = read_records()
    named = {(r["track"], r["name"]): r for r in records}
    rows = []
    for r in records:
        over = "the baseline"
        if r["on"] is not None:
            over = f"{gain(r, named[r['track'], r['on']])} over {r['on']}"
        rows.append(
            [
                r["track"],
                r["name"],
                r["change"],
                f"**{r['beam4']['sacrebleu']:.2f}** (α {r['alpha']:g})",
                f"{r['greedy']['sacrebleu']:.2f}",
                over,
                training(r),
                r["machine"]["cpu"],
                f"`{r['command']}`",
            ]
        )
    columns = ["track", "record", "what it changes", "test BLEU, beam 4", "greedy"]
    gained = "gain over the record it builds on (95% interval)"
    columns += [gained, "training", "CPU", "command"]
    best = {}  # track -> (row, beam-4 score), tracks in order
    for row, r in zip(rows, records):
        if r["beam4"]["sacrebleu"] > best.get(r["track"], (None, -1.0))[1]:
            best[r["track"]] = row, r["beam4"]["sacrebleu"]
    write_table(
        RECORDS / "speedrun-best.json",
        {
            "kind": "speedrun table",
            "command": "python speedrun/run.py --table",
            "caption": (
                "each track's highest beam-4 score, a tie or not; every record, with"
                " its command, on [the speedrun page](book/speedrun.md)"
            ),
            "tables": [
                {
                    "columns": columns[:-1],
                    "rows": [row[:-1] for row, _ in best.values()],
                    "align": "llllrrll",
                }
            ],
        },
    )
    return write_table(
        RECORDS / "speedrun.json",
        {
            "kind": "speedrun table",
            "command": "python speedrun/run.py --table",
            "caption": (
                "sacreBLEU on the public Tatoeba test,"
                f" {records[0]['signature'] if records else ''}; rendered from"
                " speedrun/records/ by `python speedrun/run.py --table`"
            ),
            "tables": [{"columns": columns, "rows": rows, "align": "llllrrlll"}],
        },
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("track", nargs="?", choices=list(TRACKS))
    parser.add_argument("name", nargs="?", help="the record's name: letters, digits, -")
    parser.add_argument("change", nargs="?", help="what the run changes, in words")
    parser.add_argument(
        "--on", help="the record of this track that the run changes (none: a baseline)"
    )
    parser.add_argument(
        "--average",
        type=int,
        default=1,
        metavar="N",
        help="score the mean of the final weights and the last N - 1 epoch ends (train"
        " with --keep-last N - 1 or more)",
    )
    parser.add_argument("--resume", action="store_true", help="go on with the run")
    parser.add_argument("--table", action="store_true", help="only render the table")
    args, options = parser.parse_known_args(argv)
    options = [o for o in options if o != "--"]
    if not args.table:
        named = args.track and args.name and args.change
        if not named or not args.name.replace("-", "").isalnum():
            parser.error(
                "give the track, a name (letters, digits, dashes) and what the run"
                " changes"
            )
        what = args.track, args.name, args.change, args.on, options
        written = run(*what, resume=args.resume, average=args.average)
        print(f"speedrun: wrote {written}")
    print(f"speedrun: wrote {table()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
