"""Graders for the exercises' *implement* tasks and the assignments' tasks. Each
`check_*` calls a learner's function or module on a few cases, compares the result with
the course's own, and raises `CheckFailed` with one sentence: the failing case and, when
the result matches a usual mistake, why (an exception: the learner's line that raised
it). `score_concepts` checks a chapter's concept questions; `answers_well_formed` only
the form of an assignment's.
"""

# ruff: noqa: F401  (re-exported: __all__ lists GRADERS, the check_* names below)
from nmt_lib.checks.a1 import check_alibi_bias, check_local_attention, check_window_mask
from nmt_lib.checks.a2 import check_n_best, check_penalised_greedy
from nmt_lib.checks.a2 import check_repetition_penalty
from nmt_lib.checks.a3 import check_ablation, check_beats_reference, check_runs
from nmt_lib.checks.concepts import answers_well_formed, score_concepts
from nmt_lib.checks.core import CheckFailed, compare, learner_call, named_mistake
from nmt_lib.checks.core import run_check
from nmt_lib.checks.later import check_attention_entropy, check_encode_word
from nmt_lib.checks.later import check_sliced_loss, check_smoothed_loss, check_top_p
from nmt_lib.checks.modern import check_kv_sharing, check_rms_norm, check_rope
from nmt_lib.checks.sequences import check_attention, check_brevity_penalty
from nmt_lib.checks.sequences import check_masked_cross_entropy, check_masked_softmax
from nmt_lib.checks.sequences import check_nadaraya_watson, check_truncate_pad
from nmt_lib.checks.transformer import check_beam_step, check_decoder_block
from nmt_lib.checks.transformer import check_kv_cache_step, check_multihead
from nmt_lib.checks.transformer import check_sinusoidal_table, check_split_merge

GRADERS = {name: g for name, g in globals().items() if name.startswith("check_")}
__all__ = ["CheckFailed", "compare", "learner_call", "named_mistake", "run_check"]
__all__ += ["GRADERS", "score_concepts", "answers_well_formed", *GRADERS]
