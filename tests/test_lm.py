"""The decoder-only language model of chapter 11: causality, tied weights, the KV cache,
sampling rules, perplexity, the Penn Treebank loader and its errors."""

import math

import pytest
import torch

from nmt_lib.lm import GRULM, DecoderOnlyLM, LMConfig, generate
from nmt_lib.lm_train import UnigramLM, gru_width_like, sentence_stream
from nmt_lib.lm_train import stream_perplexity, train_lm
from nmt_lib.model_helpers import num_parameters
from nmt_lib.modern import ModernLM
from nmt_lib.text import Vocab


def tiny_lm(context=16, norm_first=False, parts=None, vocab_size=40):
    torch.manual_seed(0)
    sizes = dict(d_model=16, n_heads=2, d_ff=32, n_layers=2, norm_first=norm_first)
    cfg = LMConfig(vocab_size, context=context, **sizes)
    return (DecoderOnlyLM(cfg) if parts is None else ModernLM(cfg, parts)).eval()


def sample(model, prompt, steps, seed, **kw):
    """`generate` drawing from a generator seeded with `seed`."""
    return generate(
        model, prompt, steps, generator=torch.Generator().manual_seed(seed), **kw
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_the_output_at_t_does_not_change_when_later_tokens_change(norm_first):
    model = tiny_lm(norm_first=norm_first)
    x = torch.randint(4, 40, (3, 12))
    for t in range(11):
        changed = x.clone()
        changed[:, t + 1 :] = torch.randint(4, 40, changed[:, t + 1 :].shape)
        a, b = model(x)[0], model(changed)[0]
        assert torch.allclose(a[:, : t + 1], b[:, : t + 1], atol=1e-6)
        # the check can see a change
        assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :])


def test_the_output_layer_is_the_embedding_and_learns_from_both_uses():
    model = tiny_lm()
    assert model.out.weight is model.embedding.weight
    untied = num_parameters(model) + 40 * 16
    model.out.weight = torch.nn.Parameter(model.embedding.weight.detach().clone())
    assert num_parameters(model) == untied
    tied = tiny_lm().train()
    x = torch.randint(4, 40, (2, 8))
    tied(x)[0].sum().backward()
    # the rows of tokens never read get a gradient too: from the output layer
    unread = [i for i in range(40) if i not in x.flatten().tolist()]
    assert tied.embedding.weight.grad[unread].abs().sum() > 0


@pytest.mark.parametrize("today", [False, True])  # chapter 12's parts: RoPE, GQA too
def test_the_kv_cache_gives_the_logits_of_reading_everything_at_once(today):
    from nmt_lib.modern import ModernParts

    parts = ModernParts(rms=True, swiglu=True, rope=True, kv_heads=1) if today else None
    model = tiny_lm(norm_first=today, parts=parts)
    x = torch.randint(4, 40, (2, 10))
    full = model(x)[0]
    logits, past = model(x[:, :4], model.empty_cache())
    steps = [logits]
    for t in range(4, 10):
        logits, past = model(x[:, t : t + 1], past)
        steps.append(logits)
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
    # the key/value heads the cache keeps
    assert past[0].k.shape[1] == (1 if today else 2)


def greedy_by_recomputing(model, prompt, steps):
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            tokens.append(int(model(torch.tensor([tokens]))[0][0, -1].argmax()))
    return tokens[len(prompt) :]


def test_greedy_generation_and_top_k_1_agree_with_recomputing():
    model = tiny_lm(context=20)
    prompt = [2, 7, 9]
    greedy = generate(model, prompt, 10, greedy=True)
    assert greedy == greedy_by_recomputing(model, prompt, 10)
    assert sample(model, prompt, 10, 3, top_k=1) == greedy
    assert generate(model, prompt, 10, top_k=1, temperature=5.0) == greedy


def test_sampling_follows_the_temperature_and_stops_at_eos_or_the_context():
    model = tiny_lm(context=8)
    assert len(sample(model, [2, 5], 100, 0)) == 6  # context 8 full
    first = generate(model, [2], 1, greedy=True)[0]
    assert generate(model, [2], 5, greedy=True, eos_id=first) == [first]
    cold = {sample(model, [2], 1, s, temperature=0.05)[0] for s in range(20)}
    hot = {sample(model, [2], 1, s, temperature=50.0)[0] for s in range(40)}
    assert cold == {first} and len(hot) > 10
    top3 = set(model(torch.tensor([[2]]))[0][0, -1].topk(3).indices.tolist())
    drawn = {sample(model, [2], 1, s, top_k=3, temperature=50.0)[0] for s in range(40)}
    assert drawn <= top3


def test_a_window_longer_than_the_context_is_an_error():
    # the positional table's end
    with pytest.raises(ValueError, match="max_len"):
        tiny_lm(context=8)(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError):
        LMConfig(vocab_size=10, d_model=10, n_heads=4)


def test_perplexity_of_the_unigram_model_equals_the_cross_entropy_of_the_frequencies():
    train = torch.tensor([4, 4, 5, 6, 4, 5, 2] * 5)
    held = torch.tensor([4, 5, 5, 6, 2, 4, 4, 7, 4, 5])
    model = UnigramLM(train, 8)
    probs = (torch.bincount(train, minlength=8).double() + 1) / (len(train) + 8)
    expected = math.exp(
        -sum(math.log(probs[t]) for t in held[1:].tolist()) / (len(held) - 1)
    )
    for steps in (1, 3, 4, 20):  # every token after the first, whatever the windows
        assert stream_perplexity(model, held, steps, batch_size=2) == pytest.approx(
            expected, rel=1e-6
        )


def test_a_short_training_run_lowers_the_held_out_perplexity_of_both_models():
    vocab = Vocab(["a b c d", "e f g"])
    stream = sentence_stream(["a b c d", "e f g"] * 60, vocab)
    assert stream[:5].tolist() == vocab.encode("a b c d") + [vocab.eos_id]
    for model in (tiny_lm(vocab_size=len(vocab)).train(), GRULM(len(vocab), 16)):
        before = stream_perplexity(model, stream, 8)
        history = train_lm(
            model, stream, epochs=3, batch_size=8, num_steps=8, lr=1e-2, quiet=True
        )
        assert history["epoch"] == [1, 2, 3]
        assert stream_perplexity(model, stream, 8) < before / 2


def test_the_gru_width_matches_the_parameter_budget():
    for budget, vocab in [(200_000, 1000), (1_500_000, 8000)]:
        width = gru_width_like(budget, vocab)
        assert abs(num_parameters(GRULM(vocab, width)) - budget) < 0.05 * budget
