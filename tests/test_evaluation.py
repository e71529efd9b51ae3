"""nmt_lib.evaluation: BLEU by length bucket and per-sentence scores."""

import pytest

from nmt_lib.evaluation import bleu_by_length, per_sentence
from nmt_lib.metrics import corpus_bleu
from nmt_lib.decoding import BleuResult

SOURCES = ["go .", "i am here .", "he is very cold .", "we are in the house ."]
REFS = [
    ["va !"],
    ["je suis là .", "me voici ."],
    ["il a très froid ."],
    ["nous sommes dans la maison ."],
]
HYPS = ["va !", "je suis ici .", "il a très froid .", "nous sommes à la maison ."]


def test_bleu_by_length_buckets_sentences_and_scores_each_bucket():
    bleu = corpus_bleu(
        [h.split() for h in HYPS], [[r.split() for r in rs] for rs in REFS]
    )
    table = bleu_by_length(BleuResult(bleu, SOURCES, HYPS, REFS), edges=(1, 4, 6, 100))
    assert list(table.index) == ["1-3", "4-5", "6-99"]
    assert list(table["sentences"]) == [1, 2, 1]
    assert table.loc["4-5", "BLEU"] == pytest.approx(
        corpus_bleu(
            [HYPS[1].split(), HYPS[2].split()],
            [[r.split() for r in REFS[1]], REFS[2][0].split()],
        )
    )


def test_per_sentence_uses_the_best_reference():
    table = per_sentence(BleuResult(0.0, SOURCES, HYPS, REFS))
    bleu = table["sentence BLEU"]
    assert bleu[0] == bleu[2] == 1.0 and 0 < bleu[1] < 1
    assert table["references"][1] == "je suis là . | me voici ."
