"""The hidden cases of assignment 3, for the teacher, graded from the checkpoints handed
in: the chosen setting measured on the test split, and the ablation table's figures
measured again."""

from nmt_lib.checks.a3 import RUNS, check_ablation, check_beats_reference, runs_bleu
from nmt_lib.checks.core import CheckFailed


def beats_reference(runs, chosen):
    """The public grader again, on the test split."""
    return check_beats_reference(runs, chosen, "test")


def public_ablation(runs, table, chosen):
    """The public grader of the table, which reads no runs."""
    return check_ablation(table, chosen)


def ablation(runs, table, chosen):
    """Each row's validation BLEU read again from its run's checkpoint, and the chosen
    setting's two rows in full: the difference to the reference of the same seed and its
    interval (chapter 4a's paired bootstrap, its defaults)."""
    from nmt_lib.run.records import bleu_interval

    wanted = set(table.index) | {("reference", 1), ("reference", 2)}
    missing = sorted(key for key in wanted if key not in runs)
    if missing:
        raise CheckFailed(
            f"`ablation` has rows with no checkpoint in {RUNS}/: "
            f"{', '.join(f'{name}.seed{seed}.pt' for name, seed in missing)}"
        )
    bleu = runs_bleu({key: runs[key] for key in wanted}, "valid")
    for key, row in table.iterrows():
        if abs(float(row["valid BLEU"]) - bleu[key].bleu) > 0.05:
            raise CheckFailed(
                f"`ablation`, row {key}: valid BLEU {float(row['valid BLEU']):.2f}, but"
                f" its checkpoint measures {bleu[key].bleu:.2f}"
            )
    for seed in (1, 2):
        mine, base = bleu[chosen, seed], bleu["reference", seed]
        low, high = bleu_interval(mine.counts(), base.counts())
        measured = {
            "minus reference": (mine.bleu - base.bleu, 0.05),
            "low": (low, 0.1),
            "high": (high, 0.1),
        }
        for column, (value, tolerance) in measured.items():
            if abs(float(table.loc[(chosen, seed), column]) - value) > tolerance:
                raise CheckFailed(
                    f"`ablation`, row ({chosen!r}, {seed}): {column} is"
                    f" {float(table.loc[(chosen, seed), column]):.2f}, but its"
                    f" checkpoint measures {value:.2f} against the reference of seed"
                    f" {seed}"
                )
    return (
        "each row's BLEU and the chosen rows' intervals, measured again from the"
        " checkpoints"
    )
