"""nmt_lib.base.device: the device and thread choice, and the code paths that must
follow a model's device.

Tests marked `cuda` need an NVIDIA GPU and are skipped, with that reason, on a CPU-only
machine.
"""

from functools import partial

import pytest
import torch

from conftest import save_model, tiny_model, train_tiny
from nmt_lib.base import cache
from nmt_lib.base.device import DeviceError, default_device
from nmt_lib.decoding import beam_search, greedy_decode, translate
from nmt_lib.run.checkpoint import load_checkpoint
from nmt_lib.training import TrainSettings, batch_loss
from nmt_lib.transformer import Transformer, TransformerConfig

cuda = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs an NVIDIA GPU (CUDA); this machine has none",
)


@pytest.mark.parametrize("name", ["gpu", "cuda:x", "xla"])
def test_an_unknown_device_is_a_one_line_error_naming_where_it_came_from(
    monkeypatch, name
):
    monkeypatch.setenv("NMT_DEVICE", name)
    with pytest.raises(DeviceError) as err:
        default_device()
    message = str(err.value)
    assert message.startswith(f"NMT_DEVICE '{name}'") and "\n" not in message


def test_cached_fit_stores_weights_on_the_cpu_and_loads_them_where_build_puts_them(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path))
    loads = []
    real_load = torch.load
    monkeypatch.setattr(
        torch,
        "load",
        lambda *a, **kw: loads.append(kw.get("map_location")) or real_load(*a, **kw),
    )
    build = lambda: torch.nn.Linear(2, 2)
    cache.cached_fit("lin", {"a": 1}, build, lambda m: {"trained": True})
    stored = real_load(next(tmp_path.rglob("lin-*.pt")), weights_only=True)
    assert all(t.device.type == "cpu" for t in stored["state_dict"].values())
    no_fit = lambda m: pytest.fail("should load, not train")
    cache.cached_fit("lin", {"a": 1}, build, no_fit)
    assert loads == [torch.device("cpu")]


def small_batch(corpus):
    return next(iter(corpus.loader("train", batch_size=8)))


@cuda
def test_cpu_and_cuda_give_the_same_loss_gradients_and_translations(corpus):
    batch, settings = small_batch(corpus), TrainSettings(label_smoothing=0.1)
    sentences = [s for s, _ in corpus.splits.train[:16]]
    vocabs = corpus.src_vocab, corpus.tgt_vocab
    results = []
    for device in ["cpu", "cuda"]:
        model = tiny_model(corpus, dropout=0.0).to(device)
        loss, n = batch_loss(model, batch.to(device), settings, corpus.tgt_vocab.pad_id)
        (loss * n).backward()
        grads = [p.grad.cpu() for p in model.parameters()]
        greedy = translate(model, sentences, *vocabs, max_len=12)
        beam = partial(beam_search, beam_size=3)
        beam = translate(model, sentences, *vocabs, max_len=12, search=beam)
        results.append((loss.item(), grads, greedy, beam))
    (l_cpu, g_cpu, t_cpu, b_cpu), (l_gpu, g_gpu, t_gpu, b_gpu) = results
    assert abs(l_cpu - l_gpu) < 1e-4
    # The sums run in another order, so compare against the whole gradient's scale: some
    # gradients (the keys' bias: softmax ignores a shift shared by all keys) are zero
    # but for round-off on both devices.
    scale = max(g.abs().max().item() for g in g_cpu)
    for a, b in zip(g_cpu, g_gpu):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5 * scale)
    assert t_cpu == t_gpu and b_cpu == b_gpu


@cuda
def test_a_checkpoint_saved_on_cuda_loads_on_the_cpu(tmp_path, corpus):
    path = save_model(tmp_path / "g.pt", tiny_model(corpus).cuda(), corpus)
    ckpt = load_checkpoint(path, device="cpu")
    assert all(t.device.type == "cpu" for t in ckpt.model.state_dict().values())
    ids, kw = torch.tensor([[4, 5, 2]]), dict(bos_id=1, eos_id=2, max_len=5)
    assert len(greedy_decode(ckpt.model, ids, torch.tensor([3]), **kw).tokens) == 1


def test_transformer_runs_on_the_meta_device_without_touching_the_cpu():
    """A cheap stand-in for 'follows the device' on machines without a GPU: nothing is
    created on the CPU."""
    with torch.device("meta"):
        config = TransformerConfig(20, 30, d_model=16, n_heads=2, d_ff=32, n_layers=1)
        model = Transformer(config)
        src, tgt = (
            torch.zeros(2, 4, dtype=torch.long),
            torch.zeros(2, 3, dtype=torch.long),
        )
        assert model(src, torch.tensor([4, 2]), tgt).device.type == "meta"


@pytest.mark.parametrize(
    "precision, loss",
    [("fp32", "plain"), ("bf16", "plain"), ("bf16", "sliced"), ("fp16", "plain")],
)
def test_fit_in_low_precision_keeps_fp32_weights_and_trains(
    corpus, tmp_path, precision, loss
):
    model = tiny_model(corpus, dropout=0.0)
    settings = dict(epochs=10, max_steps=12, max_tokens=120, warmup=4, lr_factor=0.3)
    settings |= dict(loss=loss, precision=precision)
    progress = train_tiny(model, corpus, settings, checkpoint=tmp_path / "p.pt")
    losses = progress["history"]["train_loss"]
    assert len(losses) == 12 and all(map(torch.isfinite, torch.tensor(losses)))
    assert sum(losses[-3:]) < sum(losses[:3])
    assert all(p.dtype == torch.float32 for p in model.parameters())
    saved = load_checkpoint(tmp_path / "p.pt").model.state_dict().values()
    assert all(t.dtype == torch.float32 for t in saved if t.is_floating_point())


def test_the_first_low_precision_loss_is_close_to_fp32(corpus):
    model, batch = tiny_model(corpus, dropout=0.0), small_batch(corpus)
    settings = TrainSettings(label_smoothing=0.1)
    full = batch_loss(model, batch, settings, corpus.tgt_vocab.pad_id)[0]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = batch_loss(model, batch, settings, corpus.tgt_vocab.pad_id)[0]
    assert low.dtype == torch.float32 and abs(low.item() / full.item() - 1) < 0.01
