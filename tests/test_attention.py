"""nmt_lib.attention, nmt_lib.multihead and nmt_lib.positional, against d2l and
PyTorch."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nmt_lib.attention import AdditiveAttention, DotProductAttention, attend
from nmt_lib.attention import causal_mask, lens_to_mask, masked_softmax
from nmt_lib.multihead import MultiHeadAttention, kept_weights, merge_heads, split_heads
from nmt_lib.positional import PositionalEncoding, relative_shift_matrix
from nmt_lib.positional import sinusoidal_table

try:
    import d2l.torch as d2l
except ImportError:  # the course runs without d2l; only the comparisons with it skip
    d2l = None
needs_d2l = pytest.mark.skipif(d2l is None, reason="d2l is not installed")


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


# ---------------------------------------------------------------- masks and masked
# softmax


def test_lens_to_mask_and_causal_mask():
    Y, N = True, False
    assert lens_to_mask(torch.tensor([2, 0]), 3).tolist() == [[[Y, Y, N]], [[N, N, N]]]
    assert lens_to_mask(torch.tensor([[1, 3]]), 3).tolist() == [[[Y, N, N], [Y, Y, Y]]]
    assert causal_mask(3).tolist() == [[Y, N, N], [Y, Y, N], [Y, Y, Y]]
    # Two new queries after three processed tokens: positions 3 and 4 of five keys.
    assert causal_mask(2, 5, offset=3).tolist() == [[Y, Y, Y, Y, N], [Y] * 5]
    assert torch.equal(causal_mask(2, 5, offset=3), causal_mask(5)[3:])


def test_masked_softmax_sums_to_one_and_is_exactly_zero_where_masked():
    scores = torch.randn(4, 5, 6) * 10
    mask = torch.rand(4, 5, 6) > 0.4
    mask[:, :, 0] = True
    w = masked_softmax(scores, mask=mask)
    assert torch.all(w[~mask] == 0)
    assert torch.allclose(w.sum(-1), torch.ones(4, 5))


def test_fully_masked_rows_give_zeros_without_nan_in_values_or_gradients():
    scores = torch.randn(2, 3, 4, requires_grad=True)
    w = masked_softmax(scores, torch.tensor([[0, 2, 4], [1, 0, 3]]))
    assert torch.all(w[0, 0] == 0) and torch.all(w[1, 1] == 0)
    (w * torch.randn_like(w)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    q, k, v = (torch.randn(2, 3, 8, requires_grad=True) for _ in range(3))
    mask = torch.zeros(2, 3, 3, dtype=torch.bool)
    out, weights = attend(q, k, v, mask, need_weights=True)
    out.sum().backward()
    assert torch.all(out == 0) and torch.all(weights == 0)
    assert torch.isfinite(q.grad).all()


@pytest.mark.parametrize(
    "lens", [torch.tensor([1, 4, 6]), torch.tensor([[1, 2], [6, 3], [5, 5]])]
)
@needs_d2l
def test_masked_softmax_matches_d2l(lens):
    x = torch.randn(3, 2, 6)
    assert torch.allclose(
        masked_softmax(x, lens), d2l.masked_softmax(x.clone(), lens), atol=1e-6
    )


# ---------------------------------------------------------------- scoring functions


@needs_d2l
def test_additive_attention_matches_d2l_with_copied_weights():
    q, k, v = torch.randn(2, 3, 5), torch.randn(2, 7, 4), torch.randn(2, 7, 6)
    lens = torch.tensor([3, 7])
    ours = AdditiveAttention(query_size=5, key_size=4, num_hiddens=8).eval()
    ref = d2l.AdditiveAttention(num_hiddens=8, dropout=0).eval()
    ref(q, k, v, lens)  # materialise the lazy layers
    with torch.no_grad():
        for name in ["W_q", "W_k", "w_v"]:
            getattr(ref, name).weight.copy_(getattr(ours, name).weight)
    out, weights = ours(q, k, v, lens_to_mask(lens, 7))
    assert torch.allclose(out, ref(q, k, v, lens), atol=1e-6)
    assert torch.allclose(weights, ref.attention_weights, atol=1e-6)
    assert torch.all(weights[0, :, 3:] == 0)


def test_attend_fused_and_explicit_agree_and_match_torch():
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 3)
    mask = torch.rand(2, 1, 5, 7) > 0.3
    mask[..., 0] = True  # every query may attend somewhere
    fused, none = attend(q, k, v, mask)
    explicit, weights = attend(q, k, v, mask, need_weights=True)
    assert none is None and weights.shape == (2, 4, 5, 7)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 4, 5))
    assert not weights.masked_select(~mask).any()
    assert torch.allclose(fused, explicit, atol=1e-5)
    torch_s = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.allclose(fused, torch_s, atol=1e-6)


@needs_d2l
def test_attend_matches_d2l_dot_product_attention():
    q, k, v = torch.randn(3, 4, 8), torch.randn(3, 6, 8), torch.randn(3, 6, 2)
    lens = torch.tensor([2, 6, 1])
    ref = d2l.DotProductAttention(dropout=0).eval()(q, k, v, lens)
    assert torch.allclose(attend(q, k, v, lens_to_mask(lens, 6))[0], ref, atol=1e-6)


def test_dot_product_module_uses_dropout_only_in_training():
    q, k, v = torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 4)
    layer = DotProductAttention(dropout=0.5)
    eval_out = layer.eval()(q, k, v)
    assert torch.allclose(eval_out, attend(q, k, v)[0])
    layer.keep_weights = True  # the explicit path, with dropout on the weights
    assert not torch.allclose(layer.train()(q, k, v), eval_out)


def test_attend_refuses_a_float_mask_that_the_fused_kernel_would_add():
    q, kv = torch.randn(1, 2, 4), torch.randn(1, 3, 4)
    with pytest.raises(ValueError, match="boolean"):
        attend(q, kv, kv, torch.ones(1, 2, 3))


# ---------------------------------------------------------------- multi-head attention


def test_split_and_merge_heads_are_inverse():
    x = torch.randn(2, 5, 12)
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4) and torch.equal(heads[:, 1], x[:, :, 4:8])
    assert torch.equal(merge_heads(heads), x)


def test_multihead_paths_agree_and_padding_is_ignored():
    mha = MultiHeadAttention(16, 4).eval()
    q, kv = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    mask = lens_to_mask(torch.tensor([5, 2]), 5)
    fused = mha(q, kv, kv, mask)
    assert mha.weights is None  # the fused path keeps none
    with kept_weights(mha) as layers:
        explicit = mha(q, kv, kv, mask)
    weights = mha.weights
    assert layers == [mha] and not mha.keep_weights  # switched back off
    assert weights.shape == (2, 4, 3, 5) and torch.all(weights[1, :, :, 2:] == 0)
    assert torch.allclose(fused, explicit, atol=1e-5)
    # 3-D and 4-D masks agree
    assert torch.allclose(mha(q, kv, kv, mask.unsqueeze(1)), fused)
    padded = torch.cat([kv, torch.randn(2, 4, 16)], dim=1)  # 4 extra padding keys
    out_padded = mha(q, padded, padded, lens_to_mask(torch.tensor([5, 2]), 9))
    assert torch.allclose(out_padded, fused, atol=1e-5)


@needs_d2l
def test_multihead_matches_torch_and_d2l():
    D, H = 24, 4
    q, kv, lens = torch.randn(3, 4, D), torch.randn(3, 6, D), torch.tensor([6, 1, 4])
    ours = MultiHeadAttention(D, H).eval()
    ref = nn.MultiheadAttention(D, H, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(
            torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight])
        )
        ref.in_proj_bias.copy_(torch.cat([ours.W_q.bias, ours.W_k.bias, ours.W_v.bias]))
        ref.out_proj.weight.copy_(ours.W_o.weight)
        ref.out_proj.bias.copy_(ours.W_o.bias)
    mask = lens_to_mask(lens, 6)
    theirs, their_w = ref(
        q, kv, kv, key_padding_mask=~mask.squeeze(1), average_attn_weights=False
    )
    with kept_weights(ours):
        mine = ours(q, kv, kv, mask)
    assert torch.allclose(mine, theirs, atol=1e-5)
    assert torch.allclose(ours.weights, their_w, atol=1e-6)

    plain = MultiHeadAttention(D, H, bias=False).eval()
    d2l_mha = d2l.MultiHeadAttention(D, H, dropout=0).eval()
    d2l_mha(q, kv, kv, lens)
    with torch.no_grad():
        for name in ["W_q", "W_k", "W_v", "W_o"]:
            getattr(d2l_mha, name).weight.copy_(getattr(plain, name).weight)
    assert torch.allclose(plain(q, kv, kv, mask), d2l_mha(q, kv, kv, lens), atol=1e-5)


# ---------------------------------------------------------------- positional encoding


@needs_d2l
def test_positional_table_matches_d2l_and_is_a_buffer():
    theirs = d2l.PositionalEncoding(16, 0, max_len=50).P[0]
    assert torch.allclose(sinusoidal_table(50, 16), theirs, atol=1e-5)
    pe = PositionalEncoding(16, max_len=50)
    assert list(pe.parameters()) == [] and "P" not in pe.state_dict()
    assert "P" in dict(pe.named_buffers())
    assert pe.to(torch.float64).P.dtype == torch.float64  # moves with the module
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    assert torch.allclose(pe.eval()(x), x + sinusoidal_table(50, 16)[:7].double())


@pytest.mark.parametrize("delta", [1, 5, 17])
def test_relative_position_is_a_fixed_linear_map(delta):
    table = sinusoidal_table(120, 20)
    M = relative_shift_matrix(20, delta)
    assert torch.allclose(table[:-delta] @ M, table[delta:], atol=1e-4)
    wrong = relative_shift_matrix(20, delta + 1)
    assert not torch.allclose(table[:-delta] @ wrong, table[delta:], atol=1e-2)
