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
    torch.manual_seed(1); a = model(src, src_len, tgt)
    torch.manual_seed(1); b = model(src, src_len, changed)
    assert a.shape == (3, 6, 50)
    assert torch.allclose(a[:, :4], b[:, :4], atol=1e-5)      # positions before 4 cannot see it
    assert not torch.allclose(a[:, 4], b[:, 4])


def test_d2l_loss_is_the_per_sentence_mean_over_num_steps():
    pred = torch.randn(2, 4, 9)
    label = torch.randint(9, (2, 4))
    loss = bench.d2l_masked_loss(pred, label, torch.tensor([4, 2]))
    ce = torch.nn.functional.cross_entropy(pred.permute(0, 2, 1), label, reduction="none")
    torch.testing.assert_close(loss, torch.stack([ce[0].mean(), ce[1, :2].sum() / 4]))


def test_non_embedding_parameters_leave_out_the_embedding_tables():
    model = torch.nn.Sequential(torch.nn.Embedding(100, 8), torch.nn.Linear(8, 3))
    assert bench.non_embedding_parameters(model) == 8 * 3 + 3


def test_notebook_wall_times_come_from_the_committed_cell_timings():
    times = bench.notebook_wall_times()
    assert "07_transformer" in times and all(t >= 0 for t in times.values())
