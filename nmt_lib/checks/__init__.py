"""Graders for the exercises' *implement* tasks and the assignments' tasks. Each
`check_*` calls a learner's function or module on a few cases, compares the result with
the course's own, and raises `CheckFailed` with one sentence: the case that failed and,
when the result matches a usual mistake, why. An exception in the learner's code is
reported as the case that raised it, with the learner's line. `score_concepts` checks
the letters of a chapter's concept questions; `answers_well_formed` only checks the form
of an assignment's (its grader marks them). Tooling, not a lesson: the chapters import
these.
"""

from nmt_lib.checks.a1 import check_alibi_bias, check_local_attention, check_window_mask
from nmt_lib.checks.a2 import (
    check_n_best,
    check_penalised_greedy,
    check_repetition_penalty,
)
from nmt_lib.checks.a3 import check_ablation, check_beats_reference, check_runs
from nmt_lib.checks.concepts import answers_well_formed, score_concepts
from nmt_lib.checks.core import (
    CheckFailed,
    compare,
    learner_call,
    named_mistake,
    run_check,
)
from nmt_lib.checks.later import (
    check_attention_entropy,
    check_encode_word,
    check_sliced_loss,
    check_smoothed_loss,
    check_top_p,
)
from nmt_lib.checks.modern import check_kv_sharing, check_rms_norm, check_rope
from nmt_lib.checks.sequences import (
    check_attention,
    check_brevity_penalty,
    check_masked_cross_entropy,
    check_masked_softmax,
    check_nadaraya_watson,
    check_truncate_pad,
)
from nmt_lib.checks.transformer import (
    check_beam_step,
    check_decoder_block,
    check_kv_cache_step,
    check_multihead,
    check_sinusoidal_table,
    check_split_merge,
)

__all__ = [
    "CheckFailed",
    "compare",
    "learner_call",
    "named_mistake",
    "run_check",
    "GRADERS",
    "score_concepts",
    "answers_well_formed",
    "check_ablation",
    "check_alibi_bias",
    "check_beats_reference",
    "check_local_attention",
    "check_n_best",
    "check_penalised_greedy",
    "check_repetition_penalty",
    "check_runs",
    "check_window_mask",
    "check_attention",
    "check_attention_entropy",
    "check_beam_step",
    "check_brevity_penalty",
    "check_decoder_block",
    "check_encode_word",
    "check_kv_cache_step",
    "check_kv_sharing",
    "check_masked_cross_entropy",
    "check_masked_softmax",
    "check_multihead",
    "check_nadaraya_watson",
    "check_rms_norm",
    "check_rope",
    "check_sinusoidal_table",
    "check_sliced_loss",
    "check_smoothed_loss",
    "check_split_merge",
    "check_top_p",
    "check_truncate_pad",
]
GRADERS = {name: globals()[name] for name in __all__ if name.startswith("check_")}
