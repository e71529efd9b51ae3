"""nmt_lib.metrics against sacreBLEU (corpus BLEU) and d2l (sentence BLEU)."""

import random

import pytest

from nmt_lib.metrics import clipped_matches, corpus_bleu, ngrams, sentence_bleu

sacrebleu = pytest.importorskip("sacrebleu")
try:
    import d2l.torch as d2l
except ImportError:  # the course runs without d2l; only the comparisons with it skip
    d2l = None
needs_d2l = pytest.mark.skipif(d2l is None, reason="d2l is not installed")

WORDS = (
    "je tu il elle nous suis es est sommes là ici chat chien le la un une de à . ! ?"
)
WORDS = WORDS.split()


def random_sentence(rng, lo=1, hi=12):
    return [rng.choice(WORDS) for _ in range(rng.randint(lo, hi))]


def noisy_copy(rng, ref):
    out = [w if rng.random() < 0.8 else rng.choice(WORDS) for w in ref]
    return out[:-1] if len(out) > 3 and rng.random() < 0.3 else out


def sacre(hyps, ref_streams, **kw):
    return sacrebleu.corpus_bleu(
        [" ".join(h) for h in hyps],
        [[" ".join(r) for r in stream] for stream in ref_streams],
        tokenize="none",
        **kw,
    ).score


@pytest.mark.parametrize("seed", range(5))
def test_corpus_bleu_equals_sacrebleu_single_and_multi_reference(seed):
    rng = random.Random(seed)
    refs_a = [random_sentence(rng) for _ in range(150)]
    refs_b = [random_sentence(rng) for _ in range(150)]
    hyps = [noisy_copy(rng, r) for r in refs_a]
    hyps[3] = []  # an empty output counts too
    assert corpus_bleu(hyps, refs_a) == pytest.approx(sacre(hyps, [refs_a]), abs=1e-9)
    assert corpus_bleu(hyps, [[a, b] for a, b in zip(refs_a, refs_b)]) == pytest.approx(
        sacre(hyps, [refs_a, refs_b]), abs=1e-9
    )
    assert corpus_bleu(hyps, refs_a, smooth="none") == pytest.approx(
        sacre(hyps, [refs_a], smooth_method="none"), abs=1e-9
    )
    assert 20 < corpus_bleu(hyps, refs_a) < 90


def test_corpus_bleu_with_sparse_matches_uses_exp_smoothing_like_sacrebleu():
    rng = random.Random(7)
    hyps = [random_sentence(rng) for _ in range(60)]
    refs = [random_sentence(rng) for _ in range(60)]
    ours = corpus_bleu(hyps, refs)
    assert ours == pytest.approx(sacre(hyps, [refs]), abs=1e-9) and 0 < ours < 5


def test_corpus_bleu_extremes_and_errors():
    refs = [["le", "chat", "est", "là", "."], ["je", "suis", "ici", "!", "!"]]
    assert corpus_bleu(refs, refs) == pytest.approx(100.0)
    assert corpus_bleu([["x"] * 5, ["y"] * 5], refs) == 0.0
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        corpus_bleu(refs, refs[:1])


def test_clipping_and_ngrams():
    assert ngrams(["a", "b", "a", "b"], 2) == {("a", "b"): 2, ("b", "a"): 1}
    assert clipped_matches(["the"] * 7, [["the", "cat", "the"]], 1) == (2, 7)
    two_refs = [["the", "cat"], ["the", "the", "the"]]
    assert clipped_matches(["the"] * 7, two_refs, 1) == (3, 7)


@pytest.mark.parametrize("k", [2, 3, 4])
@needs_d2l
def test_sentence_bleu_equals_d2l(k):
    rng = random.Random(k)
    for _ in range(200):
        ref = random_sentence(rng)
        hyp = noisy_copy(rng, ref) if rng.random() < 0.5 else random_sentence(rng)
        assert sentence_bleu(hyp, ref, k) == pytest.approx(
            d2l.bleu(" ".join(hyp), " ".join(ref), k), abs=1e-12
        )
    assert sentence_bleu([], ["a"]) == 0.0
