"""nmt_lib.transformer and its decoding: causality, padding invariance, fused/explicit
paths, the weights contract, the KV cache, beam search, the dropout switch."""

import pytest
import torch

from nmt_lib.decoding import beam_search, greedy_decode, greedy_decode_nocache
from nmt_lib.decoding import translate
from nmt_lib.evaluation import sequence_scores
from nmt_lib.multihead import kept_weights
from nmt_lib.text import Vocab
from nmt_lib.transformer import Transformer, TransformerConfig

KW = dict(bos_id=1, eos_id=2)


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def make(norm_first=False, vocab=30):
    sizes = dict(d_model=32, n_heads=4, d_ff=64, n_layers=2, max_len=64)
    return Transformer(TransformerConfig(25, vocab, norm_first=norm_first, **sizes))


def batch():
    """(src, src_len, tgt_in) of three sentences of three lengths."""
    src = torch.tensor([[4, 5, 6, 7, 2], [8, 9, 2, 0, 0], [10, 2, 0, 0, 0]])
    tgt = torch.tensor([[1, 11, 12, 13], [1, 14, 15, 0], [1, 16, 0, 0]])
    return src, torch.tensor([5, 3, 2]), tgt


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_causal_in_train_and_eval_mode(norm_first, mode):
    model = make(norm_first)
    getattr(model, mode)()
    src, src_len, tgt = batch()
    changed = tgt.clone()
    changed[:, 3] = 20
    torch.manual_seed(5)
    a = model(src, src_len, tgt)
    torch.manual_seed(5)
    b = model(src, src_len, changed)
    assert torch.allclose(a[:, :3], b[:, :3], atol=1e-6)
    assert not torch.allclose(a[:, 3], b[:, 3])


def test_extra_padding_changes_no_real_output():
    model = make().eval()
    src, src_len, tgt = batch()
    padded_src = torch.cat([src, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    padded_tgt = torch.cat([tgt, torch.zeros(3, 2, dtype=torch.long)], dim=1)
    out = model(src, src_len, tgt)
    assert torch.allclose(model(padded_src, src_len, padded_tgt)[:, :4], out, atol=1e-5)
    alone = model(src[1:2, :3], src_len[1:2], tgt[1:2, :3])
    assert torch.allclose(alone, out[1:2, :3], atol=1e-5)


def test_fused_and_explicit_paths_agree_and_weights_have_the_right_shapes():
    model = make().eval()
    src, src_len, tgt = batch()
    state = model.encode(src, src_len)
    fused = model.step(tgt, state)[0]
    with kept_weights(model):
        explicit = model.step(tgt, state)[0]
    assert torch.allclose(fused, explicit, atol=1e-5)
    maps = model.attention_maps(src, src_len, tgt)
    assert [w.shape for w in maps["encoder"]] == [(3, 4, 5, 5)] * 2
    assert [w.shape for w in maps["decoder_self"]] == [(3, 4, 4, 4)] * 2
    assert [w.shape for w in maps["cross"]] == [(3, 4, 4, 5)] * 2
    assert torch.all(maps["cross"][0][2, :, :, 2:] == 0)
    assert torch.all(maps["encoder"][1][1, :, :, 3:] == 0)
    assert torch.all(maps["decoder_self"][0].triu(1) == 0)  # no weight on the future


def test_decoder_weights_follow_the_interface_and_greedy_decoding_returns_them():
    model = make().eval()
    src, src_len, tgt = batch()
    with kept_weights(model):
        logits, _, weights = model.step(tgt, model.encode(src, src_len))
    maps = model.attention_maps(src, src_len, tgt)
    assert weights.shape == (3, 4, 5)  # (B, T, S), as the GRU decoders give
    # the last layer, heads averaged
    torch.testing.assert_close(weights, maps["cross"][-1].mean(dim=1))
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4))
    assert model.step(tgt, model.encode(src, src_len))[2] is None
    with kept_weights(model := uneven_model()):
        out = greedy_decode(model, src, src_len, max_len=12, need_weights=True, **KW)
    # a row per generated token, <eos> included, and a column per real source token
    for tokens, w, n in zip(out.tokens, out.weights, src_len.tolist()):
        assert w.shape == (len(tokens) + (len(tokens) < 12), n)


def uneven_model():
    """An untrained model whose three test sentences end at three different steps (<eos>
    early)."""
    src, src_len, _ = batch()
    for seed in range(100):
        torch.manual_seed(seed)
        model = make(vocab=6).eval()
        for bias in (0.0, 1.0, 2.0):
            with torch.no_grad():
                model.decoder.dense.bias[KW["eos_id"]] = bias
            out = greedy_decode_nocache(model, src, src_len, max_len=12, **KW)
            lengths = [len(t) for t in out.tokens]
            if len(set(lengths)) == 3 and max(lengths) > 2:
                return model
    raise AssertionError("no seed gave three different lengths")


def test_cached_decoding_gives_exactly_the_tokens_of_full_recomputation():
    for model in (make(vocab=30).eval(), uneven_model()):
        src, src_len, _ = batch()
        cached = greedy_decode(model, src, src_len, max_len=12, **KW).tokens
        assert (
            cached
            == greedy_decode_nocache(model, src, src_len, max_len=12, **KW).tokens
        )
        one = lambda i: greedy_decode(
            model, src[i : i + 1, : src_len[i]], src_len[i : i + 1], max_len=12, **KW
        )
        assert cached == [one(i).tokens[0] for i in range(3)]


def test_the_fast_greedy_writes_the_tokens_and_weights_of_the_simple_one():
    from nmt_lib.fast import greedy_decode_fast  # chapter 10's: finished rows leave

    model, (src, src_len, _) = uneven_model(), batch()
    with kept_weights(model):
        simple = greedy_decode(model, src, src_len, max_len=12, need_weights=True, **KW)
        fast = greedy_decode_fast(
            model, src, src_len, max_len=12, need_weights=True, **KW
        )
    assert fast.tokens == simple.tokens and len({len(t) for t in fast.tokens}) == 3
    for a, b in zip(fast.weights, simple.weights):
        torch.testing.assert_close(a, b)
    plain = greedy_decode_fast(model, src, src_len, max_len=12, **KW)
    assert plain.tokens == simple.tokens and plain.weights == [None] * 3


def test_beam_size_one_is_greedy():
    for seed in range(4):
        torch.manual_seed(seed)
        model = make(vocab=12).eval()
        src, src_len, _ = batch()
        greedy = greedy_decode(model, src, src_len, max_len=10, **KW).tokens
        beam = beam_search(model, src, src_len, beam_size=1, max_len=10, **KW)
        assert beam.tokens == greedy


def test_beam_search_finds_a_better_sentence_than_greedy_somewhere():
    better = 0
    for seed in range(6):
        torch.manual_seed(seed)
        model = make(vocab=8).eval()
        src, src_len, _ = batch()
        greedy = greedy_decode(model, src, src_len, max_len=8, **KW).tokens
        beam = beam_search(model, src, src_len, beam_size=5, max_len=8, **KW).tokens
        score = lambda hyps: sequence_scores(
            model, src, src_len, [(h, len(h) < 8) for h in hyps], **KW
        )
        better += int((score(beam) > score(greedy) + 1e-4).sum())
    assert better > 0


def test_translate_with_beam_search_and_bad_configuration():
    src_vocab, tgt_vocab = Vocab(["i am here ."]), Vocab(["je suis là ."])
    sizes = dict(d_model=16, n_heads=2, d_ff=32, n_layers=1)
    model = Transformer(TransformerConfig(len(src_vocab), len(tgt_vocab), **sizes))
    beam = lambda *a, **k: beam_search(*a, beam_size=3, **k)
    sentences = ["I am here.", "", "unknown words"]
    out = translate(model, sentences, src_vocab, tgt_vocab, search=beam, max_len=6)
    assert out[1] == "" and all(len(o.split()) <= 6 for o in out)
    with pytest.raises(ValueError, match="dropout must be in"):  # nan too
        TransformerConfig(10, 10, dropout=float("nan"))
    with pytest.raises(ValueError, match="multiple of n_heads"):
        TransformerConfig(10, 10, d_model=30, n_heads=4)
    src, src_len = torch.tensor([[4, 2]]), torch.tensor([2])
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, src, src_len, beam_size=0, **KW)
    with pytest.raises(ValueError, match="max_len"):
        model(src, src_len, torch.ones(1, 300, dtype=torch.long))


@pytest.mark.parametrize("decode", ["greedy", "nocache", "beam", "scores"])
def test_decoding_leaves_a_training_model_in_training_mode(decode):
    model = make().train()
    src, src_len, _ = batch()
    if decode == "scores":
        sequence_scores(model, src, src_len, [([4], True)] * 3, **KW)
    else:
        search = dict(greedy=greedy_decode, nocache=greedy_decode_nocache)
        search["beam"] = lambda *a, **k: beam_search(*a, beam_size=2, **k)
        search[decode](model, src, src_len, max_len=5, **KW)
    assert model.training and all(m.training for m in model.modules())
