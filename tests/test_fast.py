"""nmt_lib.fast (chapter 10): each speed-up computes what the plain PyTorch path
computes."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nmt_lib.fast import FastDropout, LinearCrossEntropy, linear_cross_entropy
from nmt_lib.fast import token_features, use_fast_dropout
from nmt_lib.transformer import Transformer, TransformerConfig


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_fast_dropout_keeps_exactly_the_lanes_at_or_above_the_threshold(p):
    drop = FastDropout(p)
    x = torch.empty(2, 1_000_000)  # large enough to hit every lane value
    torch.manual_seed(7)
    mask = drop.mask_like(x)
    torch.manual_seed(7)  # the same 64-bit draws, by hand
    words = torch.empty((x.numel() + 3) // 4, dtype=torch.int64).random_(
        -(2**63), 2**63 - 1
    )
    lanes = words.view(torch.int16)[: x.numel()].view(x.shape).long()
    threshold = drop.drop_levels - FastDropout.LEVELS // 2
    # the boundary is in the sample
    assert (lanes == threshold).any() and (lanes == threshold - 1).any()
    scale = FastDropout.LEVELS / (FastDropout.LEVELS - drop.drop_levels)
    assert torch.equal(mask, (lanes >= threshold).float() * scale)
    assert mask.dtype == x.dtype
    wide = drop.mask_like(torch.empty(100_000, dtype=torch.float64))
    assert wide.dtype == torch.float64  # scaled in double: the exact factor
    assert set(wide.unique().tolist()) == {0.0, scale}


def test_fast_dropout_gradient_repeatability_and_edge_cases():
    x = torch.randn(4, 7, 5, requires_grad=True)
    drop = FastDropout(0.3)
    torch.manual_seed(3)
    a = drop(x)
    torch.manual_seed(3)
    b = drop(x)
    assert torch.equal(a, b) and not torch.equal(a, drop(x))  # same seed, same mask
    a.sum().backward()
    assert torch.allclose(x.grad, a / x)  # d out / d x is the scaled mask
    assert drop.eval()(x) is x and FastDropout(0.0)(x) is x
    assert torch.equal(FastDropout(1.0)(x), torch.zeros_like(x))
    assert FastDropout(0.2)(torch.ones(0, 3)).shape == (0, 3)


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("rows", [1, 7, 64, 1000])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_cross_entropy_equals_pytorch_in_value_and_gradients(eps, rows, bias):
    torch.manual_seed(0)
    layer = torch.nn.Linear(12, 37, bias=bias)
    # 70 rows: slices do not divide it evenly
    hidden = (3 * torch.randn(70, 12)).requires_grad_()
    targets = torch.randint(0, 37, (70,))

    def loss_and_grads(loss_of):
        hidden.grad = None
        layer.zero_grad(set_to_none=True)
        loss = loss_of()
        (loss * 0.37).backward()  # any gradient from above is passed on
        grads = hidden.grad, layer.weight.grad, layer.bias.grad if bias else None
        return [loss.detach(), *grads]

    expected = loss_and_grads(
        lambda: F.cross_entropy(
            layer(hidden), targets, reduction="sum", label_smoothing=eps
        )
    )
    ours = loss_and_grads(
        lambda: linear_cross_entropy(
            hidden, layer, targets, label_smoothing=eps, rows=rows
        )
    )
    for a, b in zip(ours, expected):
        if b is None:
            assert a is None
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_linear_cross_entropy_passes_gradcheck_and_skips_gradients_without_autograd():
    torch.manual_seed(1)
    layer = torch.nn.Linear(5, 9).double()
    hidden = torch.randn(11, 5, dtype=torch.double, requires_grad=True)
    targets = torch.randint(0, 9, (11,))
    assert torch.autograd.gradcheck(
        lambda h, w, b: LinearCrossEntropy.apply(h, w, b, targets, 0.1, 4),
        (hidden, layer.weight, layer.bias),
    )
    with torch.no_grad():
        value = linear_cross_entropy(
            hidden, layer, targets, label_smoothing=0.1, rows=4
        )
        theirs = F.cross_entropy(
            layer(hidden), targets, reduction="sum", label_smoothing=0.1
        )
    assert value.grad_fn is None
    torch.testing.assert_close(value, theirs)
    empty = linear_cross_entropy(hidden[:0], layer, targets[:0])
    empty.backward()
    assert empty.item() == 0.0 and not layer.weight.grad.any()


def test_use_fast_dropout_swaps_each_dropout_layer_and_both_keep_the_expectation():
    model = nn.Sequential(
        nn.Linear(3, 3), nn.Dropout(0.3), nn.Sequential(nn.Dropout(0.2), nn.ReLU())
    ).eval()
    weights = model[0].weight
    assert use_fast_dropout(model) is model and model[0].weight is weights
    names = [type(m).__name__ for m in model.modules()]
    assert names == "Sequential Linear FastDropout Sequential FastDropout ReLU".split()
    assert (model[1].p, model[2][0].p) == (0.3, 0.2)
    # each layer keeps its mode: still evaluation, no dropout
    x = torch.ones(3)
    assert not model[1].training and torch.equal(model(x), model[0](x).relu())
    x = torch.ones(400_000)
    torch.manual_seed(0)
    for layer in (nn.Dropout(0.3), FastDropout(0.3)):
        out = layer(x)
        assert abs((out == 0).float().mean() - 0.3) < 0.005
        assert abs(out.mean() - 1) < 0.01
        assert torch.equal(layer.eval()(x), x)  # both are the identity in eval mode


def test_token_features_are_the_decoder_outputs_at_the_real_positions():
    torch.manual_seed(0)
    model = Transformer(
        TransformerConfig(
            25, 30, d_model=32, n_heads=4, d_ff=64, n_layers=2, norm_first=True
        )
    ).eval()
    src, src_len = torch.tensor([[4, 5, 6, 2], [8, 2, 0, 0]]), torch.tensor([4, 2])
    tgt = torch.tensor([[1, 11, 12, 13], [1, 14, 0, 0]])
    keep = tgt != 0
    features = token_features(model, src, src_len, tgt, keep)
    assert features.shape == (int(keep.sum()), 32)
    torch.testing.assert_close(
        model.decoder.dense(features), model(src, src_len, tgt)[keep]
    )


def test_the_online_softmax_is_the_softmax_whatever_the_tile():
    from nmt_lib.fast import online_softmax

    x = torch.randn(4, 7, 100) * 5
    for tile in (1, 7, 64, 100, 500):
        torch.testing.assert_close(online_softmax(x, tile), torch.softmax(x, -1))


@pytest.mark.parametrize("tile", [1, 16, 100, 1000])
def test_tiled_attention_is_sdpa_with_padding_and_causal_masks(tile):
    from nmt_lib.fast import tiled_attention

    torch.manual_seed(0)
    q, k, v = (
        torch.randn(2, 3, 50, 16),
        torch.randn(2, 3, 70, 16),
        torch.randn(2, 3, 70, 8),
    )
    padding = (torch.arange(70) < torch.tensor([70, 9])[:, None])[:, None, None, :]
    causal = torch.ones(50, 70, dtype=torch.bool).tril(20)
    for mask in (None, padding, causal, padding & causal):
        torch.testing.assert_close(
            tiled_attention(q, k, v, mask, tile=tile),
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
            atol=1e-5,
            rtol=1e-5,
        )


def test_tiled_attention_gives_zeros_to_a_query_with_no_key_like_masked_softmax():
    from nmt_lib.attention import attend
    from nmt_lib.fast import tiled_attention

    q, k, v = torch.randn(1, 4, 8), torch.randn(1, 6, 8), torch.randn(1, 6, 8)
    mask = torch.ones(1, 4, 6, dtype=torch.bool)
    mask[0, 2] = False  # query 2 may attend nothing
    out = tiled_attention(q, k, v, mask, tile=4)
    assert out[0, 2].abs().max() == 0 and torch.isfinite(out).all()
    torch.testing.assert_close(out, attend(q, k, v, mask, need_weights=True)[0])


def test_tiled_attention_sums_half_precision_in_float32_and_broadcasts_a_mask():
    from nmt_lib.fast import online_softmax, tiled_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 40, 16) for _ in range(3))
    out = tiled_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), tile=8)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(
        out.float(), F.scaled_dot_product_attention(q, k, v), atol=2e-2, rtol=2e-2
    )
    # (B, Tq, 1): broadcast over the keys
    everywhere = torch.ones(2, 40, 1, dtype=torch.bool)
    torch.testing.assert_close(
        tiled_attention(q, k, v, everywhere, tile=8), tiled_attention(q, k, v, tile=8)
    )
    x = torch.randn(3, 20)
    x[:, :5] = float("-inf")  # a first tile of -inf: no NaN
    torch.testing.assert_close(online_softmax(x, 5), torch.softmax(x, -1))
