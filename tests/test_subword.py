"""Subword units (chapter 8b): BPE from scratch, SentencePiece's BPE as a vocabulary,
copy through attention, and the subword path through the corpus, checkpoints and the
command line."""

import pytest
import torch

from conftest import save_model
from nmt_lib.run.checkpoint import load_checkpoint
from nmt_lib.run.corpus import CorpusSettings, ParallelCorpus, learn_vocabs
from nmt_lib.run.inference import copy_unknowns, count_unknowns
from nmt_lib.subword import MARK, SubwordVocab, learn_bpe, learn_bpe_simple
from nmt_lib.text import Vocab
from nmt_lib.transformer import Transformer, TransformerConfig
from nmt_lib.unknowns import replace_unknowns

STEMS = "chant parl mange regard aim jou travaill dans port cherch".split()
ENDINGS = "e es ons ez ent ais ait ions iez aient erai eras".split()


def corpus_lines(n=400):
    """French-looking sentences with shared stems and endings: plenty of pairs to merge,
    few ties."""
    g = torch.Generator().manual_seed(0)
    pick = lambda seq: seq[int(torch.randint(len(seq), (1,), generator=g))]
    return [
        " ".join(pick(STEMS) + pick(ENDINGS) for _ in range(1 + i % 5)) + " ."
        for i in range(n)
    ]


def test_bpe_learns_the_most_frequent_pair_first_and_counts_by_hand():
    bpe = learn_bpe(["low low low lower lowest"], 4)
    # '▁l', 'lo' and 'ow' each occur 5 times: the tie goes to the alphabetically first
    # ('▁' sorts after letters), then 'low' and '▁low' tie at 5 and 3 characters each;
    # '▁low'+'e' (2 times) comes last.
    assert [a + b for a, b in bpe.merges] == ["lo", "low", MARK + "low", MARK + "lowe"]
    assert bpe.encode("low") == [MARK + "low"]
    assert bpe.encode("lower") == [MARK + "lowe", "r"]


def test_bpe_round_trip_is_exact_even_with_odd_spacing_and_unseen_characters():
    lines = corpus_lines()
    bpe = learn_bpe(lines, 200)
    for s in lines + ["", "a  b", " leading", "東京 chante"]:
        assert bpe.decode(bpe.encode(s)) == s
    # learned pieces shorten known words
    assert len(bpe.encode("chantons")) < len("chantons")


@pytest.mark.parametrize("learn", [learn_bpe, learn_bpe_simple])
def test_bpe_stops_when_no_pair_is_left(learn):
    assert len(learn(["ab"], 10)) == 2  # '▁a', then '▁ab': nothing more to merge
    assert len(learn([], 10)) == 0


def test_the_incremental_bpe_learns_the_simple_ones_merges_in_order():
    lines = corpus_lines() + ["aaaa aaa", "abab ab"]  # overlapping pairs: left to right
    assert learn_bpe(lines, 300).merges == learn_bpe_simple(lines, 300).merges


def test_from_scratch_bpe_and_sentencepiece_learn_the_same_merges_and_segmentations():
    lines = corpus_lines()
    vocab = SubwordVocab.learn(lines, 400)
    theirs = vocab.merged_pieces()
    mine = learn_bpe(lines, len(theirs))
    assert len(theirs) > 50
    assert [a + b for a, b in mine.merges] == theirs
    assert all(mine.encode(s) == vocab.split(s) for s in lines)


def test_subword_vocab_round_trips_and_falls_back_to_bytes_for_unseen_scripts():
    vocab = SubwordVocab.learn(corpus_lines(), 400)
    assert vocab.idx_to_token[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    text = "nous chantons à 東京 ."
    ids = vocab.encode(text)
    assert vocab.unk_id not in ids and "<0xE6>" in vocab.split(text)
    assert vocab.detokenize(vocab.to_tokens(ids)) == text
    assert SubwordVocab(vocab.model_bytes).idx_to_token == vocab.idx_to_token


def pairs_with_held_out_word(n=600):
    lines = corpus_lines(n)
    return [(f"src {i} " + s, s) for i, s in enumerate(lines)]


def corpus_file(path, pairs):
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return path


def test_subwords_are_learned_on_the_training_split_only(tmp_path):
    pairs = pairs_with_held_out_word()
    bpe = dict(tokenizer="bpe", vocab_size=400, valid_frac=0.1, test_frac=0.1)
    data = ParallelCorpus(corpus_file(tmp_path / "1.txt", pairs), **bpe)
    held_out = {s for part in (data.splits.valid, data.splits.test) for s, _ in part}
    # A word seen only in held-out targets (the split follows the source), repeated
    # there many times ...
    pairs2 = [(s, t + " zyxw zyxw zyxw") if s in held_out else (s, t) for s, t in pairs]
    data2 = ParallelCorpus(corpus_file(tmp_path / "2.txt", pairs2), **bpe)
    assert data2.splits.train == data.splits.train
    # ... leaves no trace in the pieces
    assert not any("zy" in p for p in data2.tgt_vocab.idx_to_token)
    # the same word in training: merged
    pairs3 = [(s, t + " zyxw zyxw zyxw") for s, t in pairs]
    data3 = ParallelCorpus(corpus_file(tmp_path / "3.txt", pairs3), **bpe)
    assert any("zy" in p for p in data3.tgt_vocab.idx_to_token)


def test_shared_vocab_is_one_object_and_tie_embeddings_shares_one_matrix():
    pairs = pairs_with_held_out_word()
    bpe = CorpusSettings(tokenizer="bpe", vocab_size=400, shared_vocab=True)
    src, tgt = learn_vocabs(pairs, bpe)
    assert src is tgt
    w_src, w_tgt = learn_vocabs(pairs, CorpusSettings(shared_vocab=True))
    assert w_src is w_tgt and "src" in w_src and "chante" in w_src
    cfg = dict(d_model=16, n_heads=2, d_ff=32, n_layers=1)
    tied = Transformer(TransformerConfig(400, 400, tie_embeddings=True, **cfg))
    untied = Transformer(TransformerConfig(400, 400, **cfg))
    embeddings = tied.encoder.embedding, tied.decoder.embedding, tied.decoder.dense
    assert len({id(e.weight) for e in embeddings}) == 1
    n = lambda m: sum(p.numel() for p in m.parameters())
    assert n(untied) - n(tied) == 2 * 400 * 16
    with pytest.raises(ValueError, match="shared vocabulary"):
        TransformerConfig(400, 500, tie_embeddings=True, **cfg)


class FixedAttention(torch.nn.Module):
    """A stand-in model whose last cross-attention layer puts all weight on chosen
    source positions."""

    def __init__(self, where):
        super().__init__()
        self.where, self.w = where, torch.nn.Parameter(torch.zeros(1))
        self.cfg = TransformerConfig(10, 10, d_model=8, n_heads=2, d_ff=8, n_layers=1)

    def attention_maps(self, src, src_len, tgt_in):
        B, S, T = src.shape[0], src.shape[1], tgt_in.shape[1]
        cross = torch.zeros(B, 2, T, S)
        for b in range(B):
            for t in range(T):
                cross[b, :, t, self.where(b, t, S)] = 1.0
        return {"cross": [cross]}


def test_replace_unknowns_copies_the_source_word_attended_most_at_that_step():
    src_vocab, tgt_vocab = Vocab(["tom likes paris"]), Vocab(["tom aime paris"])
    sources = [["tom", "likes", "zurich"], ["tom", "likes", "paris"]]
    outputs = [["tom", "aime", "<unk>"], ["tom", "aime", "paris"]]
    # Step t attends to source position t: the <unk> at step 2 gets "zurich".
    diagonal = FixedAttention(lambda b, t, S: min(t, S - 1))
    out = replace_unknowns(diagonal, sources, outputs, src_vocab, tgt_vocab)
    assert out == [["tom", "aime", "zurich"], ["tom", "aime", "paris"]]
    # All weight on <eos> (the last position) is never copied: the best real word is
    # taken instead.
    last = FixedAttention(lambda b, t, S: S - 1)
    out = replace_unknowns(last, sources[:1], outputs[:1], src_vocab, tgt_vocab)
    assert out[0][2] in sources[0]


def test_copy_unknowns_works_on_word_checkpoints_and_leaves_subword_output_alone():
    class Ckpt:
        src_vocab, tgt_vocab = Vocab(["tom likes paris"]), Vocab(["tom aime paris"])
        model = FixedAttention(lambda b, t, S: min(t, S - 1))

    copied = lambda: copy_unknowns(Ckpt, ["tom likes zurich"], ["tom aime <unk>"])
    assert copied() == ["tom aime zurich"]
    assert count_unknowns(["tom aime <unk>", "a <unk> <unk>", "x \u2047 y"]) == 4
    Ckpt.tgt_vocab = SubwordVocab.learn(corpus_lines(), 400)
    assert copied() == ["tom aime <unk>"]


def bpe_corpus(tmp_path):
    path = tmp_path / "fr.txt"
    path.write_text(
        "".join(f"{s.upper()}\t{s}\n" for _, s in pairs_with_held_out_word(300)),
        encoding="utf-8",
    )
    return path


def test_checkpoint_keeps_the_tokenizer(tmp_path):
    corpus = ParallelCorpus(
        bpe_corpus(tmp_path), tokenizer="bpe", vocab_size=400, shared_vocab=True
    )
    sizes = dict(d_model=16, n_heads=2, d_ff=32, n_layers=1, tie_embeddings=True)
    model = Transformer(TransformerConfig(400, 400, **sizes))
    ckpt = load_checkpoint(save_model(tmp_path / "b.pt", model, corpus))
    assert isinstance(ckpt.tgt_vocab, SubwordVocab) and ckpt.src_vocab is ckpt.tgt_vocab
    assert ckpt.model.decoder.dense.weight is ckpt.model.encoder.embedding.weight
    sentence = "nous chantons ."
    assert ckpt.tgt_vocab.split(sentence) == corpus.tgt_vocab.split(sentence)
