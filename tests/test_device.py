"""nmt_lib.base.device: the device and thread choice, and the code paths that must
follow a model's device.

Tests marked `cuda` need an NVIDIA GPU and are skipped, with that reason, on a CPU-only
machine.
"""

from functools import partial

import pytest
import torch

from nmt_lib.base import cache
from nmt_lib.run.checkpoint import load_checkpoint, save_checkpoint
from nmt_lib.run.corpus import ParallelCorpus
from nmt_lib.decoding import beam_search, greedy_decode, translate
from nmt_lib.base.device import DeviceError, default_device
from nmt_lib.run.trainer import RunSettings
from nmt_lib.training import TrainSettings, batch_loss
from nmt_lib.transformer import Transformer, TransformerConfig
from conftest import tiny_model

cuda = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs an NVIDIA GPU (CUDA); this machine has none",
)


@pytest.mark.parametrize(
    "name, message",
    [
        ("gpu", "not a device the course knows"),
        ("cuda:x", "not a device"),
        ("xla", "not a device the course knows"),
    ],
)
def test_an_unknown_device_is_a_one_line_error_naming_where_it_came_from(
    monkeypatch, name, message
):
    monkeypatch.setenv("NMT_DEVICE", name)
    with pytest.raises(DeviceError, match=message) as err:
        default_device()
    assert str(err.value).startswith(f"NMT_DEVICE '{name}'") and "\n" not in str(
        err.value
    )


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
    stored = real_load(next(tmp_path.rglob("lin-*.pt")), weights_only=True)[
        "state_dict"
    ]
    assert all(t.device.type == "cpu" for t in stored.values())
    cache.cached_fit(
        "lin", {"a": 1}, build, lambda m: pytest.fail("should load, not train")
    )
    assert loads == [torch.device("cpu")]


def small_batch(corpus):
    return next(iter(corpus.loader("train", batch_size=8)))


@cuda
def test_cpu_and_cuda_give_the_same_loss_gradients_and_translations(de_corpus):
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    batch, settings = small_batch(corpus), TrainSettings(label_smoothing=0.1)
    results = {}
    for device in ["cpu", "cuda"]:
        model = tiny_model(corpus, dropout=0.0).to(device)
        loss, n = batch_loss(model, batch.to(device), settings, corpus.tgt_vocab.pad_id)
        (loss * n).backward()
        grads = [p.grad.cpu() for p in model.parameters()]
        sentences = [s for s, _ in corpus.splits.train[:16]]
        greedy = translate(
            model, sentences, corpus.src_vocab, corpus.tgt_vocab, max_len=12
        )
        beam = translate(
            model,
            sentences,
            corpus.src_vocab,
            corpus.tgt_vocab,
            max_len=12,
            search=partial(beam_search, beam_size=3),
        )
        results[device] = (loss.item(), grads, greedy, beam)
    (l_cpu, g_cpu, t_cpu, b_cpu), (l_gpu, g_gpu, t_gpu, b_gpu) = (
        results["cpu"],
        results["cuda"],
    )
    assert abs(l_cpu - l_gpu) < 1e-4
    # The sums run in another order, so compare against the whole gradient's scale: some
    # gradients (the keys' bias: softmax ignores a shift shared by all keys) are zero
    # but for round-off on both devices.
    scale = max(g.abs().max().item() for g in g_cpu)
    for a, b in zip(g_cpu, g_gpu):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5 * scale)
    assert t_cpu == t_gpu and b_cpu == b_gpu


@cuda
def test_a_checkpoint_saved_on_cuda_loads_on_the_cpu(tmp_path, de_corpus):
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    model = tiny_model(corpus).cuda()
    path = save_checkpoint(
        tmp_path / "g.pt",
        model,
        corpus.src_vocab,
        corpus.tgt_vocab,
        data=corpus.settings,
    )
    ckpt = load_checkpoint(path, device="cpu")
    assert all(t.device.type == "cpu" for t in ckpt.model.state_dict().values())
    ids = torch.tensor([[4, 5, 2]])
    out = greedy_decode(
        ckpt.model, ids, torch.tensor([3]), bos_id=1, eos_id=2, max_len=5
    )
    assert len(out.tokens) == 1


def test_transformer_runs_on_the_meta_device_without_touching_the_cpu():
    """A cheap stand-in for 'follows the device' on machines without a GPU: nothing is
    created on the CPU."""
    with torch.device("meta"):
        model = Transformer(
            TransformerConfig(20, 30, d_model=16, n_heads=2, d_ff=32, n_layers=1)
        )
        src, src_len, tgt = (
            torch.zeros(2, 4, dtype=torch.long),
            torch.tensor([4, 2]),
            torch.zeros(2, 3, dtype=torch.long),
        )
    assert model(src, src_len, tgt).device.type == "meta"


@pytest.mark.parametrize(
    "precision, loss",
    [("fp32", "plain"), ("bf16", "plain"), ("bf16", "sliced"), ("fp16", "plain")],
)
def test_fit_in_low_precision_keeps_fp32_weights_and_trains(
    de_corpus, tmp_path, precision, loss
):
    from nmt_lib.run.trainer import train_run

    corpus = ParallelCorpus(de_corpus, min_freq=1)
    model = tiny_model(corpus, dropout=0.0)
    settings = RunSettings(
        epochs=10,
        max_steps=12,
        max_tokens=120,
        tokens_per_update=100,
        warmup=4,
        lr_factor=0.3,
        checkpoint_every=0,
        loss=loss,
        precision=precision,
    )
    progress = train_run(
        model,
        corpus,
        settings,
        checkpoint=tmp_path / "p.pt",
        save_kwargs={"data": corpus.settings},
        report="none",
    )
    losses = progress["history"]["train_loss"]
    assert (
        len(losses) == 12
        and all(map(torch.isfinite, torch.tensor(losses)))
        and sum(losses[-3:]) < sum(losses[:3])
    )
    assert all(p.dtype == torch.float32 for p in model.parameters())
    ckpt = load_checkpoint(tmp_path / "p.pt")
    assert all(
        t.dtype == torch.float32
        for t in ckpt.model.state_dict().values()
        if t.is_floating_point()
    )


def test_the_first_low_precision_loss_is_close_to_fp32(de_corpus):
    corpus = ParallelCorpus(de_corpus, min_freq=1)
    model, batch = tiny_model(corpus, dropout=0.0), small_batch(corpus)
    settings = TrainSettings(label_smoothing=0.1)
    full = batch_loss(model, batch, settings, corpus.tgt_vocab.pad_id)[0]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = batch_loss(model, batch, settings, corpus.tgt_vocab.pad_id)[0]
    assert low.dtype == torch.float32 and abs(low.item() / full.item() - 1) < 0.01
