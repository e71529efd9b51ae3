"""Subword units (chapter 8b): BPE from scratch, SentencePiece's BPE as a vocabulary, copy through
attention, and the subword path through NMTData, checkpoints and the command line."""
import subprocess
import sys
from pathlib import Path
from functools import partial

import pytest
import torch

from nmt_lib.run.checkpoint import load_checkpoint, save_checkpoint
from nmt_lib.run.corpus import ParallelCorpus
from nmt_lib.data import NMTData, build_vocabs
from nmt_lib.run.inference import copy_unknowns, count_unknowns
from nmt_lib.subword import MARK, SubwordVocab, learn_bpe, learn_bpe_simple
from nmt_lib.text import SPECIALS, Vocab
from nmt_lib.transformer import Transformer, TransformerConfig
from nmt_lib.unknowns import replace_unknowns

ROOT = Path(__file__).resolve().parent.parent
STEMS = ["chant", "parl", "mange", "regard", "aim", "jou", "travaill", "dans", "port", "cherch"]
ENDINGS = ["e", "es", "ons", "ez", "ent", "ais", "ait", "ions", "iez", "aient", "erai", "eras"]


def corpus_lines(n=400):
    """French-looking sentences with shared stems and endings: plenty of pairs to merge, few ties."""
    g = torch.Generator().manual_seed(0)
    pick = lambda seq: seq[int(torch.randint(len(seq), (1,), generator=g))]
    return [" ".join(pick(STEMS) + pick(ENDINGS) for _ in range(1 + i % 5)) + " ." for i in range(n)]


def test_bpe_learns_the_most_frequent_pair_first_and_counts_by_hand():
    bpe = learn_bpe(["low low low lower lowest"], 4)
    # '▁l', 'lo' and 'ow' each occur 5 times: the tie goes to the alphabetically first ('▁' sorts after
    # letters), then 'low' and '▁low' tie at 5 and 3 characters each; '▁low'+'e' (2 times) comes last.
    assert [a + b for a, b in bpe.merges] == ["lo", "low", MARK + "low", MARK + "lowe"]
    assert bpe.encode("low") == [MARK + "low"] and bpe.encode("lower") == [MARK + "lowe", "r"]


def test_bpe_round_trip_is_exact_even_with_odd_spacing_and_unseen_characters():
    lines = corpus_lines()
    bpe = learn_bpe(lines, 200)
    for s in lines + ["", "a  b", " leading", "東京 chante"]:
        assert bpe.decode(bpe.encode(s)) == s
    assert len(bpe.encode("chantons")) < len("chantons")         # learned pieces shorten known words


@pytest.mark.parametrize("learn", [learn_bpe, learn_bpe_simple])
def test_bpe_stops_when_no_pair_is_left(learn):
    assert len(learn(["ab"], 10)) == 2                          # '▁a', then '▁ab': nothing more to merge
    assert len(learn([], 10)) == 0


def test_the_incremental_bpe_learns_the_simple_ones_merges_in_order():
    lines = corpus_lines() + ["aaaa aaa", "abab ab"]             # overlapping pairs are merged left to right
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


def test_subword_vocab_bad_input_is_one_line():
    with pytest.raises(ValueError, match="smaller than the alphabet") as e:
        SubwordVocab.learn(corpus_lines(), 100)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="cannot learn") as e:         # one line holds too few pairs
        SubwordVocab.learn(["bonjour le monde"], 2000)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="not a SentencePiece model"):
        SubwordVocab(b"not a model")


BPE_400 = partial(SubwordVocab.learn, vocab_size=400)


def pairs_with_held_out_word(n=600):
    lines = corpus_lines(n)
    return [(f"src {i} " + s, s) for i, s in enumerate(lines)]


def test_subwords_are_learned_on_the_training_split_only():
    pairs = pairs_with_held_out_word()
    data = NMTData(pairs, tokenizer=BPE_400, valid_frac=0.1, test_frac=0.1)
    held_out = {s for part in (data.splits.valid, data.splits.test) for s, _ in part}
    # A word seen only in held-out targets (the split follows the source), repeated there many times ...
    pairs2 = [(s, t + " zyxw zyxw zyxw") if s in held_out else (s, t) for s, t in pairs]
    data2 = NMTData(pairs2, tokenizer=BPE_400, valid_frac=0.1, test_frac=0.1)
    assert data2.splits.train == data.splits.train
    assert not any("zy" in p for p in data2.tgt_vocab.idx_to_token)    # ... leaves no trace in the pieces
    pairs3 = [(s, t + " zyxw zyxw zyxw") for s, t in pairs]             # the same word in training: merged
    data3 = NMTData(pairs3, tokenizer=BPE_400, valid_frac=0.1, test_frac=0.1)
    assert any("zy" in p for p in data3.tgt_vocab.idx_to_token)


def test_shared_vocab_is_one_object_and_tie_embeddings_shares_one_matrix():
    pairs = pairs_with_held_out_word()
    src, tgt = build_vocabs(pairs, tokenizer=BPE_400, shared_vocab=True)
    assert src is tgt
    w_src, w_tgt = build_vocabs(pairs, tokenizer="word", shared_vocab=True)
    assert w_src is w_tgt and "src" in w_src and "chante" in w_src
    cfg = dict(d_model=16, n_heads=2, d_ff=32, n_layers=1)
    tied, untied = Transformer(TransformerConfig(400, 400, tie_embeddings=True, **cfg)), Transformer(
        TransformerConfig(400, 400, **cfg))
    assert tied.encoder.embedding.weight is tied.decoder.embedding.weight is tied.decoder.dense.weight
    n = lambda m: sum(p.numel() for p in m.parameters())
    assert n(untied) - n(tied) == 2 * 400 * 16
    with pytest.raises(ValueError, match="shared vocabulary"):
        TransformerConfig(400, 500, tie_embeddings=True, **cfg)
    with pytest.raises(ValueError, match='tokenizer must be "word" or a function'):
        build_vocabs(pairs, tokenizer="bpe")             # a name is the command line's business


def test_word_vocab_split_and_detokenize_are_inverse():
    vocab = Vocab(["je suis là ."])
    assert vocab.split("je suis là .") == ["je", "suis", "là", "."]
    assert vocab.detokenize(vocab.split("je suis là .")) == "je suis là ."
    assert vocab.encode("je suis") == vocab[["je", "suis"]]


class FixedAttention(torch.nn.Module):
    """A stand-in model whose last cross-attention layer puts all weight on chosen source positions."""

    def __init__(self, where):
        super().__init__()
        self.where, self.cfg, self.w = where, TransformerConfig(10, 10, d_model=8, n_heads=2, d_ff=8, n_layers=1), \
            torch.nn.Parameter(torch.zeros(1))

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
    out = replace_unknowns(FixedAttention(lambda b, t, S: min(t, S - 1)), sources, outputs, src_vocab, tgt_vocab)
    assert out == [["tom", "aime", "zurich"], ["tom", "aime", "paris"]]
    # All weight on <eos> (the last position) is never copied: the best real word is taken instead.
    out = replace_unknowns(FixedAttention(lambda b, t, S: S - 1), sources[:1], outputs[:1], src_vocab, tgt_vocab)
    assert out[0][2] in sources[0]


def test_copy_unknowns_works_on_word_checkpoints_and_leaves_subword_output_alone():
    class Ckpt:
        src_vocab, tgt_vocab = Vocab(["tom likes paris"]), Vocab(["tom aime paris"])
        model = FixedAttention(lambda b, t, S: min(t, S - 1))
    assert copy_unknowns(Ckpt, ["tom likes zurich"], ["tom aime <unk>"]) == ["tom aime zurich"]
    assert count_unknowns(["tom aime <unk>", "a <unk> <unk>", "x \u2047 y"]) == 4
    Ckpt.tgt_vocab = SubwordVocab.learn(corpus_lines(), 400)
    assert copy_unknowns(Ckpt, ["tom likes zurich"], ["tom aime <unk>"]) == ["tom aime <unk>"]


def bpe_corpus(tmp_path):
    path = tmp_path / "fr.txt"
    path.write_text("".join(f"{s.upper()}\t{s}\n" for _, s in pairs_with_held_out_word(300)), encoding="utf-8")
    return path


def test_checkpoint_keeps_the_tokenizer(tmp_path):
    corpus = ParallelCorpus(bpe_corpus(tmp_path), tokenizer="bpe", vocab_size=400, shared_vocab=True)
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(400, 400, d_model=16, n_heads=2, d_ff=32, n_layers=1, tie_embeddings=True))
    path = save_checkpoint(tmp_path / "b.pt", model, corpus.src_vocab, corpus.tgt_vocab, data=corpus.settings)
    ckpt = load_checkpoint(path)
    assert isinstance(ckpt.tgt_vocab, SubwordVocab) and ckpt.src_vocab is ckpt.tgt_vocab
    assert ckpt.model.decoder.dense.weight is ckpt.model.encoder.embedding.weight
    assert ckpt.tgt_vocab.split("nous chantons .") == corpus.tgt_vocab.split("nous chantons .")


def cli_run(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "nmt_lib", *map(str, args)], input=stdin, capture_output=True,
                          text=True, cwd=ROOT, timeout=300)


def test_cli_trains_translates_and_evaluates_with_shared_subwords_and_tied_embeddings(tmp_path):
    data, ckpt = bpe_corpus(tmp_path), tmp_path / "bpe.pt"
    small = ["--d-model", 16, "--heads", 2, "--d-ff", 32, "--layers", 1, "--max-tokens", 200,
             "--tokens-per-update", 200, "--warmup", 2, "--progress", "none", "--data", data]
    out = cli_run("train", *small, "--tokenizer", "bpe", "--vocab-size", 400, "--tie-embeddings", "--out", ckpt)
    assert out.returncode == 2 and "--tie-embeddings needs --shared-vocab" in out.stderr
    out = cli_run("train", *small, "--tokenizer", "bpe", "--vocab-size", 400, "--shared-vocab", "--tie-embeddings",
                  "--max-steps", 3, "--out", ckpt)
    assert out.returncode == 0, out.stderr
    assert "shared vocab en=400" in out.stderr
    assert "not validated: it stopped before an epoch's end" in out.stdout      # not "no validation split"
    out = cli_run("translate", "--checkpoint", ckpt, stdin="NOUS CHANTONS 東京 .\n\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("\n") == 2 and "<unk>" not in out.stdout
    out = cli_run("evaluate", "--checkpoint", ckpt, "--limit", 5)
    assert out.returncode == 0, out.stderr
    assert "<unk> in the output" in out.stdout and "signature: nrefs:" in out.stdout


def test_word_checkpoint_evaluate_counts_and_copies_unknowns_and_translate_writes_none(tmp_path):
    data = bpe_corpus(tmp_path)
    corpus = ParallelCorpus(data, min_freq=1)
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(len(corpus.src_vocab), len(corpus.tgt_vocab), d_model=16, n_heads=2,
                                          d_ff=32, n_layers=1))
    with torch.no_grad():                       # a model that writes nothing but <unk>
        model.decoder.dense.bias.zero_()
        model.decoder.dense.weight.zero_()
        model.decoder.dense.bias[corpus.tgt_vocab.unk_id] = 5.0
    path = save_checkpoint(tmp_path / "w.pt", model, corpus.src_vocab, corpus.tgt_vocab, data=corpus.settings)
    out = cli_run("evaluate", "--checkpoint", path, "--limit", 3)
    assert out.returncode == 0, out.stderr
    assert "<unk> in the output, each replaced by the source word" in out.stdout
    count = int(out.stdout.split(" <unk> in the output")[0].split()[-1].replace(",", ""))
    assert count == 3 * 80                      # every step of the 3 sentences, up to max_len 80
    out = cli_run("translate", "--checkpoint", path, stdin="NOUS CHANTONS .\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() and set(out.stdout.split()) <= {"nous", "chantons", "."}   # copies of source words
    out = cli_run("translate", "--checkpoint", path, "--tokenized", stdin="NOUS CHANTONS .\n")
    assert "<unk>" in out.stdout


def test_a_shared_word_vocabulary_loads_as_one_object(tmp_path):
    corpus = ParallelCorpus(bpe_corpus(tmp_path), min_freq=1, shared_vocab=True)
    assert corpus.src_vocab is corpus.tgt_vocab
    n = len(corpus.src_vocab)
    model = Transformer(TransformerConfig(n, n, d_model=16, n_heads=2, d_ff=32, n_layers=1, tie_embeddings=True))
    path = save_checkpoint(tmp_path / "w.pt", model, corpus.src_vocab, corpus.tgt_vocab, data=corpus.settings)
    ckpt = load_checkpoint(path)
    assert ckpt.src_vocab is ckpt.tgt_vocab and ckpt.payload["tokenizer"] == {"kind": "word", "shared": True}


def test_every_tokenizer_saves_and_loads_through_one_interface(tmp_path, monkeypatch):
    from nmt_lib.run import tokenizers
    sentences = corpus_lines(200)
    made = {"word": Vocab(sentences), "bpe": SubwordVocab.learn(sentences, 300)}
    assert set(made) == set(tokenizers.TOKENIZERS)
    for name, vocab in made.items():
        again = tokenizers.BY_KIND[vocab.kind].from_state(vocab.idx_to_token, vocab.state())
        assert type(again) is tokenizers.TOKENIZERS[name] and again.idx_to_token == vocab.idx_to_token
        assert again.encode(sentences[0]) == vocab.encode(sentences[0])

    class Letters(Vocab):                       # a new kind: one class, registered in one place
        kind = "letters"

        def split(self, sentence):
            return [ch for ch in sentence if not ch.isspace()]

    monkeypatch.setitem(tokenizers.BY_KIND, "letters", Letters)
    letters = Letters.from_tokens(list(SPECIALS) + sorted(set("".join(sentences)) - {" "}))
    assert letters.unk_id not in letters.encode("chante")
    model = Transformer(TransformerConfig(len(letters), len(letters), d_model=16, n_heads=2, d_ff=32, n_layers=1))
    ckpt = load_checkpoint(save_checkpoint(tmp_path / "l.pt", model, letters, letters, data={}))
    assert type(ckpt.tgt_vocab) is Letters and ckpt.src_vocab is ckpt.tgt_vocab
    assert ckpt.tgt_vocab.encode("chante") == letters.encode("chante")
