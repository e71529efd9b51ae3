"""bench/bench.py's contenders compute what they claim (speed itself is measured by the script, not here)."""
import importlib.util
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("bench", ROOT / "bench" / "bench.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def batch(T=6):
    torch.manual_seed(0)
    src = torch.randint(4, 40, (3, 7))
    src_len = torch.tensor([7, 5, 2])
    tgt = torch.randint(4, 50, (3, T))
    return src, src_len, tgt


@pytest.mark.parametrize("build", ["d2l", "torch"])
def test_baselines_are_causal_and_give_logits_over_the_target_vocabulary(build):
    src, src_len, tgt = batch()
    if build == "d2l":
        from nmt_lib.data import Batch
        sample = Batch(src, src_len, tgt, tgt, torch.tensor([6, 6, 6]))
        model, _ = bench.build_d2l(40, 50, sample)
    else:
        model = bench.TorchTransformer(40, 50)
    model.train()
    changed = tgt.clone()
    changed[:, 4] = 3
    torch.manual_seed(1)
    a = model(src, src_len, tgt)
    torch.manual_seed(1)
    b = model(src, src_len, changed)
    assert a.shape == (3, 6, 50)
    assert torch.allclose(a[:, :4], b[:, :4], atol=1e-5)      # positions before 4 cannot see it
    assert not torch.allclose(a[:, 4], b[:, 4])


def padded_batch_and_both_models():
    """A batch whose second target ends in padding, and the course's and torch's models in eval mode."""
    from nmt_lib.transformer import Transformer, TransformerConfig
    src, src_len, tgt = batch()
    tgt[1, 4:] = 0
    models = (bench.TorchTransformer(40, 50).eval(),
              Transformer(TransformerConfig(40, 50, d_model=16, n_heads=2, d_ff=32, n_layers=1)).eval())
    return (src, src_len, tgt, tgt != 0), models


def test_features_give_the_full_logits_at_the_kept_positions_for_both_models():
    (src, src_len, tgt, keep), models = padded_batch_and_both_models()
    for model in models:
        full = model(src, src_len, tgt)
        logits = bench.output_layer(model)(bench.features(model, src, src_len, tgt, keep))
        assert logits.shape == (int(keep.sum()), 50) and torch.allclose(logits, full[keep], atol=1e-5)


def test_d2l_loss_is_the_per_sentence_mean_over_num_steps():
    pred = torch.randn(2, 4, 9)
    label = torch.randint(9, (2, 4))
    loss = bench.d2l_masked_loss(pred, label, torch.tensor([4, 2]))
    ce = torch.nn.functional.cross_entropy(pred.permute(0, 2, 1), label, reduction="none")
    torch.testing.assert_close(loss, torch.stack([ce[0].mean(), ce[1, :2].sum() / 4]))


def test_non_embedding_parameters_leave_out_the_embedding_tables():
    model = torch.nn.Sequential(torch.nn.Embedding(100, 8), torch.nn.Linear(8, 3))
    assert bench.non_embedding_parameters(model) == 8 * 3 + 3


def test_notebook_wall_times_run_from_the_first_cell_start_to_the_last_reply(tmp_path):
    import json

    def cell(start, end):
        return {"cell_type": "code", "metadata": {"execution": {"iopub.execute_input": start,
                                                                "shell.execute_reply": end}}}
    cells = [cell("2026-01-01T10:00:05.000Z", "2026-01-01T10:00:09.000Z"),
             {"cell_type": "markdown", "metadata": {}},
             cell("2026-01-01T10:00:09.500Z", "2026-01-01T10:00:17.500Z"),
             {"cell_type": "code", "metadata": {}}]                      # never executed: no timing
    (tmp_path / "01_x.ipynb").write_text(json.dumps({"cells": cells}))
    (tmp_path / "02_unrun.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {}}]}))
    assert bench.notebook_wall_times(tmp_path) == {"01_x": 12.5}


def test_one_at_a_time_with_the_output_layer_on_the_newest_position_gives_the_same_tokens():
    from nmt_lib.decoding import greedy_decode_nocache
    from nmt_lib.transformer import Transformer, TransformerConfig
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(40, 12, d_model=16, n_heads=2, d_ff=32, n_layers=1)).eval()
    src, src_len, _ = batch()
    kw = dict(bos_id=1, eos_id=2, max_len=9)
    dense = model.decoder.dense
    calls = []
    dense.register_forward_hook(lambda m, inp, out: calls.append(inp[0].shape[1]))
    assert bench.nocache_last_position(model, src, src_len, **kw).tokens == \
        greedy_decode_nocache(model, src, src_len, **kw).tokens
    assert model.decoder.dense is dense                         # the wrapper is taken off again
    steps = len(calls) // 2
    assert calls[:steps] == [1] * steps and calls[steps:] == list(range(1, steps + 1))


def test_course_step_loss_is_the_mean_cross_entropy_over_real_tokens_for_both_models():
    from nmt_lib.seq2seq import masked_cross_entropy
    (src, src_len, tgt, keep), models = padded_batch_and_both_models()
    for model in models:
        fused = bench.linear_cross_entropy(bench.features(model, src, src_len, tgt, keep), bench.output_layer(model),
                                           tgt[keep]) / int(keep.sum())
        expected, n = masked_cross_entropy(model(src, src_len, tgt), tgt, 0)
        assert n == int(keep.sum())
        torch.testing.assert_close(fused, expected, rtol=1e-5, atol=1e-6)


def test_rounds_are_disjoint_and_share_the_epochs_length_mix():
    from types import SimpleNamespace
    dataset = SimpleNamespace(tgt=[[0] * n for n in range(1, 41)])          # sentence i has i + 1 tokens
    batches = [[i] for i in range(40)][::-1]                                 # one sentence per batch, any order
    rounds = bench.round_batches(batches, dataset, rounds=4, steps=5)
    flat = [b[0] for r in rounds for b in r]
    assert len(rounds) == 4 and all(len(r) == 5 for r in rounds) and len(set(flat)) == 20
    lengths = [sorted(len(dataset.tgt[b[0]]) for b in r) for r in rounds]
    assert all(ls[0] <= 8 and ls[-1] >= 33 for ls in lengths)              # every round runs short to long
    assert max(sum(ls) for ls in lengths) - min(sum(ls) for ls in lengths) <= 8
    with pytest.raises(SystemExit, match="needs 41 batches"):
        bench.round_batches(batches, dataset, rounds=41, steps=1)


def test_a_bf16_contender_trains_in_bf16_autocast_with_fp32_weights_and_loss(monkeypatch):
    from nmt_lib.data import NMTData
    from nmt_lib.transformer import Transformer, TransformerConfig
    pairs = [(f"i see {w} .", f"je vois {w} .") for w in ["a", "b", "c", "d", "e", "f"]] * 2
    data = NMTData(pairs, valid_frac=0.0, test_frac=0.0, min_freq=1)
    pad = dict(pad_id=data.tgt_vocab.pad_id, bos_id=data.tgt_vocab.bos_id, eos_id=data.tgt_vocab.eos_id)
    dataset = data.loader("train", batch_size=4).dataset
    import nmt_lib.fast as fast                 # the course contender runs chapter 10's sliced loss
    losses = []
    real = fast.linear_cross_entropy
    monkeypatch.setattr(fast, "linear_cross_entropy", lambda h, *a, **k: losses.append(h.dtype) or real(h, *a, **k))
    dtypes = []
    real_features = fast.token_features
    monkeypatch.setattr(fast, "token_features", lambda *a: dtypes.append(torch.get_autocast_dtype("cpu")
                                                                         if torch.is_autocast_enabled("cpu") else None)
                        or real_features(*a))
    for dtype in [None, torch.bfloat16]:
        torch.manual_seed(0)
        model = Transformer(TransformerConfig(len(data.src_vocab), len(data.tgt_vocab), d_model=16, n_heads=2,
                                              d_ff=32, n_layers=1, dropout=0.0))
        before = [p.detach().clone() for p in model.parameters()]
        c = bench.Contender("c", model, None, torch.optim.Adam(model.parameters(), 1e-2), dtype=dtype)
        assert bench.course_step(pad, dataset, c, list(range(4))) > 0
        assert all(p.dtype == torch.float32 for p in model.parameters())
        assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert dtypes == [None, torch.bfloat16] and losses == [torch.float32] * 2   # the loss always in fp32
