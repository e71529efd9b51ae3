"""The public Tatoeba test set (`nmt_lib.run.testsets`): read from a data folder (its
download is test_download's), and the corpus pairs it rules out of training and
validation (`--exclude tatoeba`)."""

import hashlib
import os
from pathlib import Path

import pytest

from conftest import german_lines, write_corpus
from nmt_lib.run import testsets
from nmt_lib.run.corpus import CorpusSettings, ParallelCorpus

SHARED = Path(os.environ.get("NMT_DATA_DIR", "/nonexistent"))


def plant_test_set(folder: Path, pairs, monkeypatch) -> Path:
    """A small test set in the layout of the real one, its SHA-256s made the expected
    ones."""
    files = {"t.eng": "".join(s + "\n" for s, _ in pairs)}
    files["t.fra"] = "".join(t + "\n" for _, t in pairs)
    target = folder / testsets.TATOEBA_FOLDER
    target.mkdir(parents=True)
    for name, text in files.items():
        (target / name).write_text(text, encoding="utf-8")
    monkeypatch.setattr(
        testsets,
        "TATOEBA_FILES",
        {n: hashlib.sha256(t.encode()).hexdigest() for n, t in files.items()},
    )
    monkeypatch.setenv("NMT_DATA_DIR", str(folder))
    return target


@pytest.mark.skipif(
    not (SHARED / "tatoeba-test").is_dir(), reason="needs the test set in NMT_DATA_DIR"
)
def test_the_real_test_set_and_its_overlap_with_the_corpus():
    from nmt_lib.base.download import fra_eng_path
    from nmt_lib.text import read_pairs

    test = testsets.read_tatoeba_test()
    assert len(test) == 12_681
    assert test[1] == (
        "95 years old! God Save the Queen!",
        "95 ans ! Dieu sauve la reine !",
    )
    corpus = read_pairs(fra_eng_path())
    english, french = {s for s, _ in corpus}, {t for _, t in corpus}
    # the count the issue quotes
    assert sum(s in english or t in french for s, t in test) == 6_705
    overlaps = testsets.overlap_filter(test)
    # corpus pairs --exclude leaves out
    assert sum(overlaps(s, t) for s, t in corpus) == 13_728
    seen = testsets.overlap_filter(corpus)  # what the records call test_pairs_in_corpus
    # 23 more once spaces and Unicode are normalised
    assert sum(seen(s, t) for s, t in test) == 6_728


def test_exclude_leaves_test_sentences_out_of_training_validation_and_the_vocabulary(
    tmp_path, monkeypatch
):
    corpus = write_corpus(tmp_path)
    # Two test pairs: one shares its English sentence with the corpus, one its target
    # (with an odd space).
    english, target = german_lines()[0].split("\t")[0], german_lines()[7].split("\t")[1]
    odd = ("Nothing to see.", target.replace(" ", "\u00a0", 1))
    plant_test_set(tmp_path, [(english, "Rien à voir."), odd], monkeypatch)
    splits = dict(min_freq=1, valid_frac=0.2, test_frac=0.2)
    plain = ParallelCorpus(corpus, **splits)
    kept = ParallelCorpus(corpus, **splits, exclude="tatoeba")
    assert plain.excluded == {} and kept.excluded["train"] + kept.excluded["valid"] == 2
    # both share a side; the other only once its odd space is plain
    assert kept.excluded["test_pairs"] == kept.excluded["test_pairs_in_corpus"] == 2
    assert kept.excluded["test_pairs_in_corpus_exactly"] == 1
    # kept for records
    assert kept.settings["excluded"] == kept.excluded
    assert "excluded" not in plain.settings
    for split in ("train", "valid"):
        left_out = len(getattr(plain.splits, split)) - len(getattr(kept.splits, split))
        assert left_out == kept.excluded[split]
    # the course's own test split is unchanged
    assert kept.splits.test == plain.splits.test
    banned = {english.lower(), target.lower()}
    sides = lambda pair: {side.replace(" .", ".") for side in pair}
    assert not [p for p in kept.splits.train + kept.splits.valid if banned & sides(p)]
    assert kept.settings["exclude"] == "tatoeba"
    # a resumed run, the same
    assert ParallelCorpus.from_settings(kept.settings).excluded == kept.excluded
    with pytest.raises(ValueError, match="tatoeba"):
        CorpusSettings(exclude="wmt14")


def test_raw_preprocessing_keeps_case_and_punctuation_and_needs_subwords(tmp_path):
    from nmt_lib.run.corpus import preparer
    from nmt_lib.text import preprocess

    subwords = dict(tokenizer="bpe", vocab_size=400, shared_vocab=True)
    raw = ParallelCorpus(write_corpus(tmp_path), preprocess="raw", **subwords)
    english = {s for split in raw.splits for s, _ in split}
    assert "I am tired." in english
    sentence = "Ich bin nicht müde!"
    # as written, both ways
    assert raw.tgt_vocab.detokenize(raw.tgt_vocab.split(sentence)) == sentence
    assert preparer(raw.settings)("I  am\u00a0Cold.") == "I am Cold."
    assert preparer({}) is preprocess
    with pytest.raises(ValueError, match="needs subwords"):
        CorpusSettings(preprocess="raw")


def test_exclude_also_compares_the_sentences_as_the_model_reads_them(
    tmp_path, monkeypatch
):
    from nmt_lib.text import preprocess

    corpus, english = write_corpus(tmp_path), german_lines()[0].split("\t")[0]
    # the same words, in capitals
    plant_test_set(tmp_path, [(english.upper(), "Rien à voir.")], monkeypatch)
    splits = dict(valid_frac=0.2, test_frac=0.2, exclude="tatoeba")
    lowercased = ParallelCorpus(corpus, min_freq=1, **splits)
    as_written = ParallelCorpus(
        corpus, **splits, preprocess="raw", tokenizer="bpe", vocab_size=400
    )
    in_test = preprocess(english) in {s for s, _ in lowercased.splits.test}
    left_out = lambda corpus: corpus.excluded["train"] + corpus.excluded["valid"]
    # the course's model reads both alike
    assert left_out(lowercased) == (0 if in_test else 1)
    assert left_out(as_written) == 0  # a case-keeping model does not


def test_a_data_folder_holding_the_test_set_is_only_read(tmp_path, monkeypatch):
    # An offline classroom's shared, read-only NMT_DATA_DIR: nothing is fetched or
    # written there.
    pairs = [("I am cold.", "J'ai froid."), ("Go.", "Va !")]
    plant_test_set(tmp_path, pairs, monkeypatch)
    files = lambda: sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
    before = files()
    no_fetch = lambda *a, **k: pytest.fail("the test set was downloaded")
    monkeypatch.setattr(testsets, "fetch", no_fetch)
    assert testsets.read_tatoeba_test() == pairs and files() == before
