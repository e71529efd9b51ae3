"""The hidden cases of assignment 3, for the teacher, graded from the runs handed in:
the chosen setting measured on the test split, and the ablation table's figures
measured again and its verdicts read against its intervals."""

from nmt_lib.checks.a3 import (
    RUNS,
    check_ablation,
    check_beats_reference,
    check_runs,
    runs_bleu,
)
from nmt_lib.checks.core import CheckFailed


def beats_reference(runs, chosen):
    """The public grader again, on the test split."""
    return check_beats_reference(runs, chosen, "test")


def public_ablation(runs, table, chosen):
    """The public grader of the table, which reads no runs, once the runs keep the
    rules and the figures are those of the runs (`ablation`): a table of runs that break
    the rules, or of figures they do not give, scores nothing."""
    message = check_ablation(table, chosen)
    ablation(runs, table, chosen)
    return message


def ablation(runs, table, chosen):
    """Each row's figures measured again from its run's hand-in and the reference's of
    the same seed: validation BLEU, the difference and its interval (chapter 4a's paired
    bootstrap, its defaults); and each verdict "real" exactly when the row's interval
    leaves out 0."""
    from nmt_lib.run.records import bleu_interval

    check_runs(runs, chosen)
    seeds = {seed for _, seed in table.index}
    wanted = set(table.index) | {("reference", seed) for seed in seeds}
    missing = sorted(key for key in wanted if key not in runs)
    if missing:
        raise CheckFailed(
            f"`ablation` has rows with no run in {RUNS}/: "
            f"{', '.join(f'{name}.seed{seed}' for name, seed in missing)}"
        )
    bleu = runs_bleu({key: runs[key] for key in wanted}, "valid")
    for (name, seed), row in table.iterrows():
        mine, base = bleu[name, seed], bleu["reference", seed]
        low, high = bleu_interval(mine.counts(), base.counts())
        measured = {
            "valid BLEU": (mine.bleu, 0.05),
            "minus reference": (mine.bleu - base.bleu, 0.05),
            "low": (low, 0.1),
            "high": (high, 0.1),
        }
        for column, (value, tolerance) in measured.items():
            if abs(float(row[column]) - value) > tolerance:
                raise CheckFailed(
                    f"`ablation`, row {(name, seed)}: {column} is"
                    f" {float(row[column]):.2f}, but its run measures {value:.2f}"
                    f" against the reference of seed {seed}"
                )
        real = float(row["low"]) > 0 or float(row["high"]) < 0
        if row["verdict"] != ("real" if real else "not shown"):
            raise CheckFailed(
                f"`ablation`, row {(name, seed)}: the verdict {row['verdict']!r}"
                " misreads its interval"
                f" ({float(row['low']):+.2f} to {float(row['high']):+.2f})"
            )
    return (
        "each row's BLEU, difference and interval, measured again from the runs handed"
        " in, and each verdict read right"
    )
