"""nmt_lib.data on small files the tests write themselves (d2l is the reference where it
applies)."""

from pathlib import Path

import pytest
import torch

from nmt_lib import data as D
from nmt_lib.base.cache import data_fingerprint
from nmt_lib import text as T

PAIRS_TSV = (
    "Go.\tVa !\nHi.\tSalut !\nRun!\tCours\u202f!\tCC-BY 2.0 (France) Attribution\nI"
    " won!\tJ'ai gagné !\n"
)


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


# ---------------------------------------------------------------- preprocessing


def test_preprocess_matches_d2l_on_tricky_text():
    d2l = pytest.importorskip("d2l.torch")
    text = (
        "Go.\tVa !\nWell, I'm here.\tBon, je suis là.\nWhat?!\tQuoi\u202f?!\n"
        "Il fait beau\u00a0!\tÇa va.\n...Wait.\t  Hein ?\nA.B,C!D?\tÉTÉ.\n.Start\t!x"
    )
    assert T.preprocess(text) == d2l.MTFraEng._preprocess(None, text)
    # one sentence at a time gives the same as the whole text
    for line in text.split("\n"):
        for field in line.split("\t"):
            assert T.preprocess(field) == d2l.MTFraEng._preprocess(None, field)


def test_preprocess_removes_odd_spaces_that_d2l_keeps():
    tokens = lambda text: T.tokenize(T.preprocess(text))
    assert tokens("Recule\u2009!") == ["recule", "!"]
    assert tokens("sof\u00adt zero\u200bwidth.") == ["soft", "zerowidth", "."]
    # no other change
    spaced = T.plain_spaces("Cours\u202f! Va\u00a0! sof\u00adt\tOK")
    assert spaced == "Cours ! Va ! soft\tOK"


# ---------------------------------------------------------------- reading files


def test_read_pairs_round_trip_extra_columns_and_crlf(tmp_path):
    path = write(
        tmp_path / "p.txt", PAIRS_TSV.replace("Hi.\tSalut !\n", "Hi.\tSalut !\r\n")
    )
    pairs = [("Go.", "Va !"), ("Hi.", "Salut !"), ("Run!", "Cours\u202f!")]
    assert T.read_pairs(path) == pairs + [("I won!", "J'ai gagné !")]
    assert T.read_pairs(path, max_pairs=2) == [("Go.", "Va !"), ("Hi.", "Salut !")]
    assert T.read_pairs(path, clean=True)[2] == ("run !", "cours !")


@pytest.mark.parametrize(
    "content, line, words",
    [
        ("Go.\tVa !\n\nHi.\tSalut !\n", 2, "is empty"),
        ("Go.\tVa !\nHi. Salut !\n", 2, "has no tab"),
        ("Go.\tVa !\nHi.\t \n", 2, "empty target"),
        ("Go.\tVa !\nHi.\tSalut !\n\tCours !\n", 3, "empty source"),
        ("Go.\tVa !\nRun!\tCours", None, None),  # no final newline is fine
    ],
)
def test_read_pairs_names_the_bad_line(tmp_path, content, line, words):
    path = write(tmp_path / "p.txt", content)
    if line is None:
        assert T.read_pairs(path)[-1] == ("Run!", "Cours")
        return
    with pytest.raises(ValueError, match=rf"p\.txt, line {line}\b.*{words}"):
        T.read_pairs(path)


def test_read_pairs_non_utf8_and_truncated_multibyte(tmp_path):
    path = write(tmp_path / "p.txt", b"Go.\tVa !\nHi.\tSalut !\nSummer.\t\xe9t\xe9\n")
    with pytest.raises(ValueError, match=r"line 3: not valid UTF-8"):
        T.read_pairs(path)
    cut = "Go.\tVa !\nSummer.\tÉté".encode("utf-8")[:-1]  # a download cut inside 'é'
    with pytest.raises(ValueError, match=r"line 2: not valid UTF-8"):
        T.read_pairs(write(tmp_path / "cut.txt", cut))


# ---------------------------------------------------------------- vocabulary


def test_vocab_specials_order_and_unknowns():
    v = T.Vocab(["b a b .", "c b a ."], min_freq=2)
    assert v.idx_to_token == "<pad> <bos> <eos> <unk> b . a".split()  # 'c' seen once
    assert (v.pad_id, v.bos_id, v.eos_id, v.unk_id) == (0, 1, 2, 3)
    assert v["b"] == 4 and v["c"] == v.unk_id and v[["a", "zzz"]] == [6, 3]
    assert v.to_tokens(v[["b", "a", "."]]) == ["b", "a", "."]
    assert v.to_tokens(torch.tensor([4, 2])) == ["b", "<eos>"]
    assert "a" in v and "c" not in v and len(v) == 7


def test_unk_rate():
    v = T.Vocab(["a b"])
    assert T.unk_rate(["a b c d"], v) == 0.5 and T.unk_rate([], v) == 0.0


# ---------------------------------------------------------------- split


def test_split_is_deterministic_disjoint_and_complete():
    # each source 4 times
    pairs = [(f"sentence {i % 300} .", f"phrase {i} .") for i in range(1200)]
    a = T.split_pairs(pairs, valid_frac=0.1, test_frac=0.1)
    b = T.split_pairs(list(reversed(pairs)), valid_frac=0.1, test_frac=0.1)
    assert sorted(map(len, a)) == sorted(map(len, b)) and set(a.test) == set(b.test)
    sources = [{s for s, _ in part} for part in a]
    assert sum(map(len, sources)) == len(set.union(*sources))  # disjoint
    assert sorted(a.train + a.valid + a.test) == sorted(pairs)
    assert all(0.05 < len(part) / len(pairs) < 0.15 for part in (a.test, a.valid))
    other_seed = T.split_pairs(pairs, seed=1).test
    assert set(other_seed) != set(T.split_pairs(pairs, seed=0).test)


# ---------------------------------------------------------------- padding and batches


def test_truncate_pad_and_build_array():
    assert D.truncate_pad([5, 6, 7], 5, 0) == [5, 6, 7, 0, 0]
    assert D.truncate_pad([5, 6, 7], 2, 0) == [5, 6]
    v = T.Vocab(["a b c"])
    array, valid = D.build_array(["a b", "a b c a b c"], v, num_steps=4)
    assert array.tolist() == [[v["a"], v["b"], 2, 0], [v["a"], v["b"], v["c"], v["a"]]]
    assert valid.tolist() == [3, 4]


PAIRS = [("a b c .", "x y ."), ("a .", "x y z w .")]
PAIRS += [("b c a b c .", "y ."), ("c .", "z .")]


def make_dataset():
    return D.TranslationDataset(
        PAIRS, T.Vocab(s for s, _ in PAIRS), T.Vocab(t for _, t in PAIRS)
    )


def check_batch(b: D.Batch, vocab):
    B, T = b.tgt_in.shape
    for i in range(B):
        n = int(b.tgt_len[i])
        assert b.tgt_in[i, 0] == vocab.bos_id and b.tgt_out[i, n - 1] == vocab.eos_id
        # teacher forcing shift
        assert torch.equal(b.tgt_in[i, 1:n], b.tgt_out[i, : n - 1])
        assert (b.tgt_out[i, n:] == vocab.pad_id).all()
        assert (b.tgt_in[i, n:] == vocab.pad_id).all()
        m = int(b.src_len[i])
        assert (b.src[i, m:] == vocab.pad_id).all()
        assert (b.src[i, :m] != vocab.pad_id).all()


def test_collate_per_batch_and_fixed_padding():
    ds = make_dataset()
    items = [ds[0], ds[1]]
    v = ds.tgt_vocab
    b = D.collate(items, pad_id=0, bos_id=1, eos_id=2)
    assert b.src.shape == (2, 5) and b.tgt_out.shape == (2, 6)
    assert b.src_len.tolist() == [5, 3]
    check_batch(b, v)
    fixed = D.collate(items, pad_id=0, bos_id=1, eos_id=2, num_steps=4)
    assert fixed.src.shape == fixed.tgt_in.shape == (2, 4)
    assert fixed.tgt_len.tolist() == [4, 4]
    # cut: <eos> lost, as in d2l
    assert fixed.tgt_out[1].tolist() == v[["x", "y", "z", "w"]]


def test_bucket_sampler_covers_each_index_once_and_groups_lengths():
    lengths = [(i * 37) % 50 + 1 for i in range(1000)]
    sampler = D.BucketSampler(lengths, batch_size=32, seed=3)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    assert sorted(i for b in batches for i in b) == list(range(1000))
    assert all(len(b) <= 32 for b in batches)
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    assert padded < 1.2 * sum(lengths)  # sorted pools: little padding
    assert batches == list(D.BucketSampler(lengths, batch_size=32, seed=3))
    sampler.set_epoch(1)
    assert list(sampler) != batches


def test_bucket_sampler_max_tokens():
    lengths = [(i * 13) % 40 + 1 for i in range(500)]
    batches = list(D.BucketSampler(lengths, batch_size=1000, max_tokens=200))
    assert sorted(i for b in batches for i in b) == list(range(500))
    assert all(len(b) * max(lengths[i] for i in b) <= 200 for b in batches)
    with pytest.raises(ValueError, match="max_tokens"):
        D.BucketSampler(lengths, batch_size=8, max_tokens=10)


def test_loaders_both_ways_and_padding_fraction():
    ds = make_dataset()
    fixed_length = D.make_loader(ds, 2, bucketed=False, num_steps=8)
    for loader in [D.make_loader(ds, 2), fixed_length]:
        batches = list(loader)
        assert sum(len(b.src) for b in batches) == len(PAIRS)
        for b in batches:
            check_batch(b, ds.tgt_vocab)
    fixed = D.padding_fraction(D.make_loader(ds, 4, bucketed=False, num_steps=8))
    # targets + <eos> in 4 x 8 slots
    assert fixed["tgt"] == pytest.approx(1 - (4 + 6 + 3 + 3) / 32)
    assert D.padding_fraction(D.make_loader(ds, 4))["tgt"] < fixed["tgt"]


def test_nmtdata_splits_and_vocab_from_train_only(tmp_path):
    pairs = [(f"w{i} common .", f"m{i} commun .") for i in range(400)]
    data = D.NMTData(pairs, min_freq=1, valid_frac=0.2, test_frac=0.2)
    held_out_words = {s.split()[0] for s, _ in data.splits.test}
    assert held_out_words and not held_out_words & set(data.src_vocab.idx_to_token)
    batch = next(iter(data.loader("test", batch_size=8)))
    assert (batch.src[:, 0] == data.src_vocab.unk_id).all()


# ---------------------------------------------------------------- language-model
# minibatches


def test_sequence_iterators():
    corpus = list(range(100))
    gen = torch.Generator().manual_seed(0)
    seen, kw = [], dict(batch_size=4, num_steps=5, generator=gen)
    for X, Y in D.seq_data_iter_random(corpus, **kw):
        assert X.shape == Y.shape == (4, 5) and torch.equal(Y, X + 1)
        assert (X[:, 1:] - X[:, :-1] == 1).all()
        seen += X[:, 0].tolist()
    # non-overlapping
    assert len(seen) == len(set(seen)) and all((a - seen[0]) % 5 == 0 for a in seen)
    prev = None
    for X, Y in D.seq_data_iter_sequential(corpus, **kw):
        assert X.shape == (4, 5) and torch.equal(Y, X + 1)
        if prev is not None:
            # each row continues the previous batch
            assert torch.equal(X[:, 0], prev[:, -1] + 1)
        prev = X


def test_the_data_fingerprint_changes_with_the_data():
    pairs = [(f"w{i} a .", f"m{i} b .") for i in range(200)]
    base = data_fingerprint(D.NMTData(pairs))
    assert data_fingerprint(D.NMTData(list(pairs))) == base
    assert data_fingerprint(D.NMTData(pairs[:-1])) != base
    assert data_fingerprint(D.NMTData(pairs, min_freq=1)) != base  # the default is 2
    assert data_fingerprint(D.NMTData(pairs, seed=1)) != base


def test_a_stream_too_short_for_one_window_gets_a_clear_error():
    for it in (D.seq_data_iter_random, D.seq_data_iter_sequential):
        with pytest.raises(ValueError, match="num_steps"):
            list(it([], batch_size=2, num_steps=3))
        # the smallest stream that works
        assert len(list(it(range(6), batch_size=1, num_steps=3))) >= 1
