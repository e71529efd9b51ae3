"""The public Tatoeba test set (`nmt_lib.run.testsets`): read from a data folder (its
download is test_download's), and the corpus pairs it rules out of training and
validation (`--exclude tatoeba`)."""

import hashlib
import os
from pathlib import Path

import pytest

from conftest import german_lines
from nmt_lib.run import testsets
from nmt_lib.run.corpus import CorpusSettings, ParallelCorpus

SHARED = Path(os.environ.get("NMT_DATA_DIR", "/nonexistent"))


def plant_test_set(folder: Path, pairs, monkeypatch) -> Path:
    """A small test set in the layout of the real one, its SHA-256s made the expected
    ones."""
    files = {
        "t.eng": "\n".join(s for s, _ in pairs) + "\n",
        "t.fra": "\n".join(t for _, t in pairs) + "\n",
    }
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
    assert len(test) == 12_681 and test[1] == (
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
    corpus = tmp_path / "deu.txt"
    corpus.write_text("\n".join(german_lines()) + "\n", encoding="utf-8")
    # Two test pairs: one shares its English sentence with the corpus, one its target
    # (with an odd space).
    english = german_lines()[0].split("\t")[0]
    target = german_lines()[7].split("\t")[1]
    plant_test_set(
        tmp_path,
        [
            (english, "Rien à voir."),
            ("Nothing to see.", target.replace(" ", "\u00a0", 1)),
        ],
        monkeypatch,
    )
    plain = ParallelCorpus(corpus, min_freq=1, valid_frac=0.2, test_frac=0.2)
    kept = ParallelCorpus(
        corpus, min_freq=1, valid_frac=0.2, test_frac=0.2, exclude="tatoeba"
    )
    assert plain.excluded == {} and kept.excluded["train"] + kept.excluded["valid"] == 2
    # both share a side
    assert (
        kept.excluded["test_pairs"] == 2 and kept.excluded["test_pairs_in_corpus"] == 2
    )
    # the other only once its odd space is plain
    assert kept.excluded["test_pairs_in_corpus_exactly"] == 1
    # kept for records
    assert (
        kept.settings["excluded"] == kept.excluded and "excluded" not in plain.settings
    )
    for split in ("train", "valid"):
        assert (
            len(getattr(plain.splits, split)) - len(getattr(kept.splits, split))
            == kept.excluded[split]
        )
    # the course's own test split is unchanged
    assert kept.splits.test == plain.splits.test
    banned = {
        german_lines()[0].split("\t")[0].lower(),
        german_lines()[7].split("\t")[1].lower(),
    }
    assert not [
        p
        for p in kept.splits.train + kept.splits.valid
        if banned & {p[0].replace(" .", "."), p[1].replace(" .", ".")}
    ]
    assert kept.settings["exclude"] == "tatoeba"
    # a resumed run, the same
    assert ParallelCorpus.from_settings(kept.settings).excluded == kept.excluded
    with pytest.raises(ValueError, match="exclude must be one of tatoeba"):
        CorpusSettings(exclude="wmt14")


def test_raw_preprocessing_keeps_case_and_punctuation_and_needs_subwords(tmp_path):
    from nmt_lib.run.corpus import preparer
    from nmt_lib.text import preprocess

    corpus = tmp_path / "deu.txt"
    corpus.write_text("\n".join(german_lines()) + "\n", encoding="utf-8")
    raw = ParallelCorpus(
        corpus,
        valid_frac=0.2,
        test_frac=0.2,
        preprocess="raw",
        tokenizer="bpe",
        vocab_size=400,
        shared_vocab=True,
    )
    english = {s for s, _ in raw.splits.train}
    assert "I am tired." in english or "I am tired." in {
        s for s, _ in raw.splits.valid + raw.splits.test
    }
    sentence = "Ich bin nicht müde!"
    # as written, both ways
    assert raw.tgt_vocab.detokenize(raw.tgt_vocab.split(sentence)) == sentence
    assert (
        preparer(raw.settings)("I  am\u00a0Cold.") == "I am Cold."
        and preparer({}) is preprocess
    )
    with pytest.raises(ValueError, match="needs subwords"):
        CorpusSettings(preprocess="raw")


def test_exclude_also_compares_the_sentences_as_the_model_reads_them(
    tmp_path, monkeypatch
):
    corpus = tmp_path / "deu.txt"
    corpus.write_text("\n".join(german_lines()) + "\n", encoding="utf-8")
    english = german_lines()[0].split("\t")[0]
    # the same words, in capitals
    plant_test_set(tmp_path, [(english.upper(), "Rien à voir.")], monkeypatch)
    lowercased = ParallelCorpus(
        corpus, min_freq=1, valid_frac=0.2, test_frac=0.2, exclude="tatoeba"
    )
    as_written = ParallelCorpus(
        corpus,
        valid_frac=0.2,
        test_frac=0.2,
        exclude="tatoeba",
        preprocess="raw",
        tokenizer="bpe",
        vocab_size=400,
    )
    from nmt_lib.text import preprocess

    in_test = preprocess(english) in {s for s, _ in lowercased.splits.test}
    left_out = lambda corpus: corpus.excluded["train"] + corpus.excluded["valid"]
    # the course's model reads both alike
    assert left_out(lowercased) == (0 if in_test else 1)
    assert left_out(as_written) == 0  # a case-keeping model does not


def test_a_data_folder_holding_the_test_set_is_only_read(tmp_path, monkeypatch):
    # An offline classroom's shared, read-only NMT_DATA_DIR: nothing is fetched or
    # written there.
    plant_test_set(
        tmp_path, [("I am cold.", "J'ai froid."), ("Go.", "Va !")], monkeypatch
    )
    before = sorted(
        (p.relative_to(tmp_path), p.stat().st_mtime_ns) for p in tmp_path.rglob("*")
    )
    monkeypatch.setattr(
        testsets, "fetch", lambda *a, **k: pytest.fail("the test set was downloaded")
    )
    assert testsets.read_tatoeba_test() == [
        ("I am cold.", "J'ai froid."),
        ("Go.", "Va !"),
    ]
    assert (
        sorted(
            (p.relative_to(tmp_path), p.stat().st_mtime_ns) for p in tmp_path.rglob("*")
        )
        == before
    )
