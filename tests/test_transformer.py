"""nmt_lib.transformer: causality, padding invariance, fused/explicit paths, KV cache, beam search,
FastDropout."""
import pytest
import torch
from torch import nn

from nmt_lib.data import Vocab
from nmt_lib.seq2seq import greedy_decode, translate
from nmt_lib.transformer import (FastDropout, Transformer, TransformerConfig, beam_search, greedy_decode_nocache,
                                 sequence_scores)

KW = dict(bos_id=1, eos_id=2)


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def make(norm_first=False, dropout=0.1, vocab=30):
    cfg = TransformerConfig(src_vocab_size=25, tgt_vocab_size=vocab, d_model=32, n_heads=4, d_ff=64, n_layers=2,
                            dropout=dropout, max_len=64, norm_first=norm_first)
    return Transformer(cfg)


def batch():
    src = torch.tensor([[4, 5, 6, 7, 2], [8, 9, 2, 0, 0], [10, 2, 0, 0, 0]])
    return src, torch.tensor([5, 3, 2]), torch.tensor([[1, 11, 12, 13], [1, 14, 15, 0], [1, 16, 0, 0]])


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_causal_in_train_and_eval_mode(norm_first, mode):
    model = make(norm_first)
    getattr(model, mode)()
    src, src_len, tgt = batch()
    changed = tgt.clone()
    changed[:, 3] = 20
    torch.manual_seed(5); a = model(src, src_len, tgt)
    torch.manual_seed(5); b = model(src, src_len, changed)
    assert torch.allclose(a[:, :3], b[:, :3], atol=1e-6)
    assert not torch.allclose(a[:, 3], b[:, 3])


def test_extra_padding_changes_no_real_output():
    model = make().eval()
    src, src_len, tgt = batch()
    padded_src = torch.cat([src, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    padded_tgt = torch.cat([tgt, torch.zeros(3, 2, dtype=torch.long)], dim=1)
    out = model(src, src_len, tgt)
    assert torch.allclose(model(padded_src, src_len, padded_tgt)[:, :4], out, atol=1e-5)
    assert torch.allclose(model(src[1:2, :3], src_len[1:2], tgt[1:2, :3]), out[1:2, :3], atol=1e-5)


def test_fused_and_explicit_paths_agree_and_weights_have_the_right_shapes():
    model = make().eval()
    src, src_len, tgt = batch()
    state = model.encode(src, src_len)
    fused = model.step(tgt, state)[0]
    explicit = model.step(tgt, state, need_weights=True)[0]
    assert torch.allclose(fused, explicit, atol=1e-5)
    maps = model.attention_maps(src, src_len, tgt)
    assert [w.shape for w in maps["encoder"]] == [(3, 4, 5, 5)] * 2
    assert [w.shape for w in maps["decoder_self"]] == [(3, 4, 4, 4)] * 2
    assert [w.shape for w in maps["cross"]] == [(3, 4, 4, 5)] * 2
    assert torch.all(maps["cross"][0][2, :, :, 2:] == 0) and torch.all(maps["encoder"][1][1, :, :, 3:] == 0)
    assert torch.all(maps["decoder_self"][0].triu(1) == 0)           # no weight on the future


def test_token_logits_skip_padding_and_match_the_full_logits():
    model = make().eval()
    src, src_len, tgt = batch()
    keep = tgt != 0
    full = model(src, src_len, tgt)
    assert torch.allclose(model.token_logits(src, src_len, tgt, keep), full[keep], atol=1e-6)
    model.train()                                   # same dropout masks: same numbers in training mode too
    torch.manual_seed(4); a = model.token_logits(src, src_len, tgt, keep)
    torch.manual_seed(4); b = model(src, src_len, tgt)[keep]
    assert a.shape == (int(keep.sum()), 30) and torch.allclose(a, b, atol=1e-6)
    features = model.eval().token_features(src, src_len, tgt, keep)
    assert features.shape == (int(keep.sum()), model.cfg.d_model)
    assert torch.allclose(model.decoder.dense(features), full[keep], atol=1e-6)


def test_cache_holds_projected_keys_and_values_per_layer():
    model = make().eval()
    src, src_len, tgt = batch()
    state = model.encode(src, src_len)
    _, state, _ = model.step(tgt[:, :1], state)
    _, state, _ = model.step(tgt[:, 1:2], state)
    assert state.pos == 2 and len(state.self_kv) == 2
    k, v = state.self_kv[0]
    assert k.shape == v.shape == (3, 4, 2, 8)                         # (B, H, t, Dh)
    block = model.decoder.blocks[0]
    x = model.decoder.pos(model.decoder.embedding(tgt[:, :2]) * 32 ** 0.5)
    k_ref, _ = block.self_attn.project_kv(x, x)                       # layer 0's keys, projected once
    assert torch.allclose(k, k_ref, atol=1e-5)


def uneven_model():
    """An untrained model whose three test sentences end at three different steps (<eos> early)."""
    src, src_len, _ = batch()
    for seed in range(100):
        torch.manual_seed(seed)
        model = make(vocab=6).eval()
        for bias in (0.0, 1.0, 2.0):
            with torch.no_grad():
                model.decoder.dense.bias[KW["eos_id"]] = bias
            lengths = [len(t) for t in greedy_decode_nocache(model, src, src_len, max_len=12, **KW).tokens]
            if len(set(lengths)) == 3 and max(lengths) > 2:
                return model
    raise AssertionError("no seed gave three different lengths")


def test_cached_decoding_gives_exactly_the_tokens_of_full_recomputation():
    for model in (make(vocab=30).eval(), uneven_model()):
        src, src_len, _ = batch()
        cached = greedy_decode(model, src, src_len, max_len=12, **KW)
        assert cached.tokens == greedy_decode_nocache(model, src, src_len, max_len=12, **KW).tokens
        singles = [greedy_decode(model, src[i:i + 1, :src_len[i]], src_len[i:i + 1], max_len=12, **KW).tokens[0]
                   for i in range(3)]
        assert cached.tokens == singles


def test_greedy_decode_drops_finished_sentences_from_the_batch():
    model = uneven_model()
    src, src_len, _ = batch()
    rows, step = [], model.step
    model.step = lambda tokens, state, **kw: (rows.append(tokens.shape[0]), step(tokens, state, **kw))[1]
    out = greedy_decode(model, src, src_len, max_len=12, **KW).tokens
    ended = [len(t) < 12 for t in out]
    assert sum(ended) >= 2 and rows[0] == 3
    # step k (from 0) runs the sentences that have not produced <eos> in steps 0 .. k-1
    assert rows == [sum(len(t) >= k or not e for t, e in zip(out, ended)) for k in range(len(rows))]
    assert rows[-1] < 3


def test_beam_size_one_is_greedy_and_beams_never_score_below_greedy():
    for seed in range(4):
        torch.manual_seed(seed)
        model = make(vocab=12).eval()
        src, src_len, _ = batch()
        greedy = greedy_decode(model, src, src_len, max_len=10, **KW).tokens
        assert beam_search(model, src, src_len, beam_size=1, max_len=10, **KW).tokens == greedy
        for alpha in (0.0, 1.0):
            beam = beam_search(model, src, src_len, beam_size=4, max_len=10, alpha=alpha, **KW).tokens
            ended = lambda hyps: [(h, len(h) < 10) for h in hyps]
            s_beam = sequence_scores(model, src, src_len, ended(beam), alpha=alpha, **KW)
            s_greedy = sequence_scores(model, src, src_len, ended(greedy), alpha=alpha, **KW)
            assert torch.all(s_beam >= s_greedy - 1e-5)


def test_beam_search_finds_a_better_sentence_than_greedy_somewhere():
    better = 0
    for seed in range(6):
        torch.manual_seed(seed)
        model = make(vocab=8).eval()
        src, src_len, _ = batch()
        greedy = greedy_decode(model, src, src_len, max_len=8, **KW).tokens
        beam = beam_search(model, src, src_len, beam_size=5, max_len=8, **KW).tokens
        ended = lambda hyps: [(h, len(h) < 8) for h in hyps]
        better += int((sequence_scores(model, src, src_len, ended(beam), **KW)
                       > sequence_scores(model, src, src_len, ended(greedy), **KW) + 1e-4).sum())
    assert better > 0


def test_translate_with_beam_search_and_bad_configuration():
    src_vocab, tgt_vocab = Vocab(["i am here ."]), Vocab(["je suis là ."])
    model = Transformer(TransformerConfig(len(src_vocab), len(tgt_vocab), d_model=16, n_heads=2, d_ff=32, n_layers=1))
    beam = lambda *a, **k: beam_search(*a, beam_size=3, **k)
    out = translate(model, ["I am here.", "", "unknown words"], src_vocab, tgt_vocab, search=beam, max_len=6)
    assert out[1] == "" and all(len(o.split()) <= 6 for o in out)
    with pytest.raises(ValueError, match="multiple of n_heads"):
        TransformerConfig(10, 10, d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="dropout"):
        TransformerConfig(10, 10, dropout=1.5)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, torch.tensor([[4, 2]]), torch.tensor([2]), beam_size=0, **KW)
    with pytest.raises(ValueError, match="max_len"):
        model(torch.tensor([[4, 2]]), torch.tensor([2]), torch.ones(1, 300, dtype=torch.long))


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_fast_dropout_drops_at_rate_p_in_every_lane_and_keeps_the_mean(p):
    drop = FastDropout(p)
    out = drop(torch.ones(200_000))
    kept = (out != 0).float()
    rate = drop.drop_levels / FastDropout.LEVELS
    assert abs(rate - p) <= 0.5 / FastDropout.LEVELS
    # each of the four 16-bit lanes of a 64-bit draw (the top one included) drops at the rate
    assert (kept.view(-1, 4).mean(0) - (1 - rate)).abs().max() < 0.01
    assert abs(out.mean() - 1) < 0.01 and torch.allclose(out[out != 0], torch.tensor(1 / (1 - rate)))


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_fast_dropout_keeps_exactly_the_lanes_at_or_above_the_threshold(p):
    drop = FastDropout(p)
    x = torch.empty(2, 1_000_000)                                      # large enough to hit every lane value
    torch.manual_seed(7)
    mask = drop.mask_like(x)
    torch.manual_seed(7)                                               # the same 64-bit draws, by hand
    words = torch.empty((x.numel() + 3) // 4, dtype=torch.int64).random_(-2 ** 63, 2 ** 63 - 1)
    lanes = words.view(torch.int16)[:x.numel()].view(x.shape).long()
    threshold = drop.drop_levels - FastDropout.LEVELS // 2
    assert (lanes == threshold).any() and (lanes == threshold - 1).any()   # the boundary is in the sample
    scale = FastDropout.LEVELS / (FastDropout.LEVELS - drop.drop_levels)
    assert torch.equal(mask, (lanes >= threshold).float() * scale)
    assert mask.dtype == x.dtype
    wide = drop.mask_like(torch.empty(100_000, dtype=torch.float64))
    assert wide.dtype == torch.float64                                 # scaled in double: the exact factor
    assert set(wide.unique().tolist()) == {0.0, scale}


def test_fast_dropout_gradient_repeatability_and_edge_cases():
    x = torch.randn(4, 7, 5, requires_grad=True)
    drop = FastDropout(0.3)
    torch.manual_seed(3); a = drop(x)
    torch.manual_seed(3); b = drop(x)
    assert torch.equal(a, b) and not torch.equal(a, drop(x))          # same seed, same mask
    a.sum().backward()
    assert torch.allclose(x.grad, a / x)                               # d out / d x is the scaled mask
    assert drop.eval()(x) is x and FastDropout(0.0)(x) is x
    assert torch.equal(FastDropout(1.0)(x), torch.zeros_like(x))
    assert FastDropout(0.2)(torch.ones(0, 3)).shape == (0, 3)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="in \\[0, 1\\]"):
            FastDropout(bad)


def test_the_transformer_uses_fast_dropout_everywhere_outside_attention():
    model = make()
    assert not any(isinstance(m, nn.Dropout) for m in model.modules())
    assert sum(isinstance(m, FastDropout) for m in model.modules()) == 2 + 2 * 3 + 2 * 4   # pos, enc, dec
