"""Chapter 12's parts: RoPE's relative property, the KV cache under RoPE and GQA,
RMSNorm against PyTorch's, equal parameter counts, the switches' checks, the command
line, and the graders.
"""

import pytest
import torch
from torch import nn

from test_checks import one_line  # the graders' one-sentence message
from nmt_lib.checks import check_kv_sharing, check_rms_norm, check_rope
from nmt_lib.decoding import greedy_decode, greedy_decode_nocache
from nmt_lib.lm import LMConfig
from nmt_lib.model_helpers import num_parameters
from nmt_lib.lm_translator import DecoderOnlyTranslator, prompt_greedy, translate_ids
from nmt_lib.modern import TODAY, GroupedQueryAttention, ModernLM, ModernParts
from nmt_lib.modern import ModernTransformer, RMSNorm, SwiGLU, cache_bytes, rotate
from nmt_lib.modern import swiglu_width
from nmt_lib.modern_experiment import d_ff_for, mean_difference
from nmt_lib.multihead import MultiHeadAttention
from nmt_lib.positional import relative_shift_matrix
from nmt_lib.transformer import PositionWiseFFN, TransformerConfig


def tiny(norm_first=False, **switches):
    torch.manual_seed(0)
    cfg = TransformerConfig(
        20, 30, d_model=32, n_heads=4, d_ff=48, n_layers=2, norm_first=norm_first
    )
    return ModernTransformer(cfg, ModernParts(**switches)).eval()


def test_rope_scores_depend_only_on_the_distance():
    torch.manual_seed(0)
    q, k = torch.randn(16), torch.randn(16)
    score = lambda m, n: (rotate(q[None], m) @ rotate(k[None], n).T).item()
    for m, n in [(0, 0), (5, 2), (30, 1)]:
        assert score(m, n) == pytest.approx(score(m + 17, n + 17), abs=1e-4)
    # but it does depend on the distance
    assert score(5, 2) != pytest.approx(score(5, 3), abs=1e-3)


def test_rope_is_chapter_6s_rotation_and_start_is_the_position():
    x = torch.randn(2, 6, 8)
    for m in range(6):
        # the paper's direction
        torch.testing.assert_close(
            rotate(x)[:, m], x[:, m] @ relative_shift_matrix(8, -m)
        )
    torch.testing.assert_close(
        rotate(x, start=3), rotate(torch.cat([torch.zeros(2, 3, 8), x], 1))[:, 3:]
    )
    with pytest.raises(ValueError, match="head width must be even"):
        # heads of 3 features: no pairs to turn
        GroupedQueryAttention(12, 4, rotary=True)


def test_rms_norm_is_pytorchs_and_the_model_uses_it_everywhere():
    x = torch.randn(3, 4, 10) * 2 + 1
    ours, theirs = RMSNorm(10), nn.RMSNorm(10, eps=1e-6)
    with torch.no_grad():
        ours.weight.uniform_(0.5, 2)
        theirs.weight.copy_(ours.weight)
    torch.testing.assert_close(ours(x), theirs(x))
    model = tiny(rms=True, norm_first=True)
    norms = [m for m in model.modules() if isinstance(m, (RMSNorm, nn.LayerNorm))]
    # 2 per encoder block, 3 per decoder's, 2 final
    assert len(norms) == 2 * 2 + 2 * 3 + 2
    assert all(isinstance(m, RMSNorm) for m in norms)


@pytest.mark.parametrize(
    "switches", [dict(rope=True), dict(kv_heads=1), dict(norm_first=True, **TODAY)]
)
def test_cached_decoding_is_recomputation_with_rope_and_gqa(switches):
    model = tiny(**switches)
    src, src_len = torch.randint(3, 20, (3, 6)), torch.tensor([6, 4, 2])
    kw = dict(bos_id=1, eos_id=-1, max_len=12)
    cached = greedy_decode(model, src, src_len, **kw).tokens
    assert cached == greedy_decode_nocache(model, src, src_len, **kw).tokens
    tgt = torch.randint(3, 30, (3, 7))
    state = model.encode(src, src_len)
    full = model.step(tgt, state)[0]
    steps = []
    for t in range(tgt.shape[1]):
        logits, state, _ = model.step(tgt[:, t : t + 1], state)
        steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-4)


def test_as_many_kv_heads_as_query_heads_is_multi_head_attention():
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4).eval()
    gqa = GroupedQueryAttention(32, 4, kv_heads=4)
    gqa.eval().load_state_dict(mha.state_dict())
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(gqa(x, x, x), mha(x, x, x))
    k, v = GroupedQueryAttention(32, 4, kv_heads=1).project_kv(x, x)
    assert k.shape == v.shape == (2, 1, 5, 8)
    block = tiny(kv_heads=4).encoder.blocks[0]
    assert type(block.self_attn) is MultiHeadAttention  # the 2017 module
    modules = tiny(swiglu=True, rms=True).modules()
    assert all(type(m) is not GroupedQueryAttention for m in modules)


def test_the_kv_cache_shrinks_with_the_kv_heads():
    sizes = {}
    for G in (4, 2, 1):
        model = tiny(kv_heads=G)
        src, src_len = torch.randint(3, 20, (2, 5)), torch.tensor([5, 5])
        tgt = torch.ones(2, 3, dtype=torch.long)
        sizes[G] = cache_bytes(model.step(tgt, model.encode(src, src_len))[1].self_kv)
    # layers, k+v, B, G, Dh, T, fp32
    assert sizes[4] == 2 * sizes[2] == 4 * sizes[1] == 2 * 2 * 2 * 4 * 8 * 3 * 4


def test_swiglu_and_d_ff_for_match_the_parameter_count():
    for D, F in [(128, 512), (256, 768), (64, 100)]:
        relu = num_parameters(PositionWiseFFN(D, F))
        assert abs(num_parameters(SwiGLU(D, swiglu_width(D, F))) / relu - 1) < 0.01
    build = lambda d_ff=256, **kw: ModernTransformer(
        TransformerConfig(300, 400, d_model=64, n_heads=4, n_layers=2, d_ff=d_ff),
        ModernParts(**kw),
    )
    target = num_parameters(build())
    for switches in [dict(kv_heads=1), dict(swiglu=True), TODAY]:
        f = d_ff_for(lambda d: build(**switches, d_ff=d), target)
        assert abs(num_parameters(build(**switches, d_ff=f)) / target - 1) < 0.02


def test_the_decoder_only_translator_reads_english_then_french():
    torch.manual_seed(0)
    lm = ModernLM(
        LMConfig(12 + 15, d_model=32, n_heads=4, d_ff=48, context=32, norm_first=True),
        ModernParts(**TODAY),
    )
    translator = DecoderOnlyTranslator(lm, offset=12).eval()
    src = torch.tensor([[5, 6, 7, 2], [8, 2, 0, 0]])
    src_len = torch.tensor([4, 2])
    tgt_in = torch.tensor([[1, 4, 9], [1, 11, 0]])
    logits = translator(src, src_len, tgt_in)
    assert logits.shape == (2, 3, 15)
    # row 2 without its padding
    alone = lm(torch.tensor([[8, 2, 1 + 12, 11 + 12]]))[0][0, 2:, 12:]
    torch.testing.assert_close(logits[1, :2], alone, atol=1e-5, rtol=1e-4)
    sources = [[5, 6, 7, 2], [8, 2], [9, 10, 2]]
    batched = translate_ids(translator, sources, bos_id=1, eos_id=2, max_len=6)
    # against recomputing the whole prefix at every step
    for ids, out in zip(sources, batched):
        prefix, expected = ids + [1 + 12], []
        for _ in range(6):
            token = int(lm(torch.tensor([prefix]))[0][0, -1, 12:].argmax())
            if token == 2:
                break
            expected.append(token)
            prefix.append(token + 12)
        assert out == expected
    # translate's padded batches: each prompt without its padding
    src = torch.tensor([[5, 6, 7, 2], [8, 2, 0, 0], [9, 10, 2, 0]])
    kw = dict(bos_id=1, eos_id=2, max_len=6)
    padded = prompt_greedy(translator, src, torch.tensor([4, 2, 3]), **kw)
    assert padded.tokens == batched


def test_mean_difference_is_the_two_sample_t_interval():
    from scipy import stats

    x, y = [5.2, 6.1, 4.8, 5.9, 6.4], [4.1, 4.9, 3.8, 5.6, 4.4]
    d, low, high = mean_difference(x, y)
    # pooled variance: d / t_statistic is the standard error
    result = stats.ttest_ind(x, y)
    half = stats.t.ppf(0.975, len(x) + len(y) - 2) * d / result.statistic
    assert (d, low, high) == pytest.approx((d, d - half, d + half), abs=1e-3)
    assert (low > 0) == (result.pvalue < 0.05)


def test_check_rms_norm_names_the_usual_mistakes():
    assert "right" in check_rms_norm(
        lambda x, w, eps: w * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    )
    layer = lambda x, w, eps: w * nn.functional.layer_norm(x, x.shape[-1:], eps=eps)
    assert "that is LayerNorm" in one_line(check_rms_norm, layer)
    no_root = lambda x, w, eps: w * x / (x.pow(2).mean(-1, keepdim=True) + eps)
    assert "square root" in one_line(check_rms_norm, no_root)
    no_gain = lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    assert "gain" in one_line(check_rms_norm, no_gain)
    no_eps = lambda x, w, eps: w * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True))
    assert "add eps under the square root" in one_line(check_rms_norm, no_eps)


def test_check_rope_names_the_usual_mistakes():
    assert "right" in check_rope(rotate)
    assert "not 0" in one_line(check_rope, lambda x, start: rotate(x, 0))
    assert "turned clockwise" in one_line(check_rope, _reverse)
    assert "two halves" in one_line(check_rope, _halves)


def _cos_sin(x, start):
    """RoPE's cosines and sines of each position's angles, (T, Dh / 2)."""
    T, Dh = x.shape[-2:]
    angles = torch.arange(start, start + T)[:, None] * 1e4 ** (
        -torch.arange(0, Dh, 2) / Dh
    )
    return angles.cos(), angles.sin()


def _reverse(x, start):
    """Turned by -m (chapter 6's direction): the transpose of each 2x2 rotation."""
    (c, s), a, b = _cos_sin(x, start), x[..., 0::2], x[..., 1::2]
    return torch.stack([a * c + b * s, b * c - a * s], -1).flatten(-2)


def _halves(x, start):
    (c, s), (a, b) = _cos_sin(x, start), x.chunk(2, -1)
    return torch.cat([a * c - b * s, a * s + b * c], -1)


def test_check_kv_sharing_names_repeat_and_reports_an_exception_as_its_case():
    assert "right" in check_kv_sharing(
        lambda k, h: k.repeat_interleave(h // k.shape[1], dim=1)
    )
    assert "repeat_interleave" in one_line(
        check_kv_sharing, lambda k, h: k.repeat(1, h // k.shape[1], 1, 1)
    )
    assert "wrong shape" in one_line(check_kv_sharing, lambda k, h: k)

    def crashes(k, n_heads):
        return k.expand(-1, n_heads, -1)  # the wrong number of sizes

    message = one_line(check_kv_sharing, crashes)
    assert message.startswith(
        "2 key/value heads for 4 query heads: your code raised RuntimeError"
    )
    assert "your line: return k.expand(-1, n_heads, -1)" in message

    def crashes_with_a_long_message(k, n_heads):
        raise TypeError("first line\nsecond line")

    assert one_line(check_kv_sharing, crashes_with_a_long_message).endswith(
        'TypeError: first line (your line: raise TypeError("first line\\nsecond line"))'
    )
