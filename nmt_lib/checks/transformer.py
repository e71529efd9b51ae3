"""Graders for chapters 5 to 7: splitting heads, multi-head attention as one module, the
sinusoidal table, a pre-norm decoder block, one KV-cache decoding step and one
beam-search step. Modules are graded with the course's weights loaded into them, on
outputs and gradients."""

import math

import torch
from torch import nn

from nmt_lib.checks.core import CheckFailed, compare, learner_call, named_mistake, parts
from nmt_lib.checks.core import passed, result

SPLIT_MISTAKE = (
    "split with view(B, T, H, Dh).transpose(1, 2): a reshape straight to (B, H, T, Dh)"
    " mixes positions and heads"
)


def check_split_merge(split, merge) -> str:
    """`split(x (B, T, D), n_heads)` -> (B, H, T, D/H) and `merge` back, against chapter
    5's functions."""
    from nmt_lib.multihead import merge_heads, split_heads  # chapter 5's

    # each value says where it came from
    x = torch.arange(2 * 3 * 8, dtype=torch.float32).view(2, 3, 8)
    case = "split(x, 4) for x of shape (2, 3, 8)"
    named_mistake(
        case,
        learner_call(case, split, x.clone(), 4),
        split_heads(x, 4),
        {SPLIT_MISTAKE: x.reshape(2, 4, 3, 2)},
    )
    case = "merge(split(x, 4))"
    named_mistake(
        case,
        learner_call(case, merge, split_heads(x, 4)),
        x,
        {
            "transpose back to (B, T, H, Dh) before the reshape to (B, T, D)": (
                split_heads(x, 4).reshape(2, 3, 8)
            )
        },
    )
    y = torch.randn(2, 4, 3, 2, generator=torch.Generator().manual_seed(0))
    case = "merge(y) for y of shape (2, 4, 3, 2)"
    compare(case, learner_call(case, merge, y.clone()), merge_heads(y))
    return "split and merge: right in all 3 cases"


def load_course_weights(case: str, mine, course: nn.Module):
    """Load the course module's weights into the learner's `mine`, or say which names or
    shapes do not fit."""
    if not isinstance(mine, nn.Module):
        raise CheckFailed(f"{case}: expected an nn.Module, got {type(mine).__name__}")
    state = course.state_dict()
    try:
        loaded = mine.load_state_dict(state, strict=False)
    except RuntimeError as e:
        lines = [
            line.strip() for line in str(e).splitlines() if "size mismatch" in line
        ]
        raise CheckFailed(
            f"{case}: the course's weights do not fit yours: {(lines or [str(e)])[0]}"
        ) from None
    if loaded.missing_keys or loaded.unexpected_keys:
        raise CheckFailed(
            f"{case}: the course's weights do not fit yours: expected parameters"
            f" {', '.join(sorted(state))}; yours lack"
            f" {', '.join(sorted(loaded.unexpected_keys)) or 'none'}, and have"
            f" {', '.join(sorted(loaded.missing_keys)) or 'none'}, which the course's"
            " do not"
        )
    mine.eval()


def output_of(got):
    """A module's output, from a tensor or an (output, weights) pair."""
    return got[0] if isinstance(got, (tuple, list)) else got


def _multihead(course, q, k, v, mask, *, scale=None, split="view", out_proj=True):
    """The course's multi-head attention with its weights, or a usual mistake in it."""
    H, D = course.n_heads, course.W_q.in_features
    heads = (
        (lambda x: x.view(x.shape[0], x.shape[1], H, D // H).transpose(1, 2))
        if split == "view"
        else (lambda x: x.reshape(x.shape[0], H, x.shape[1], D // H))
    )
    qh, kh, vh = heads(course.W_q(q)), heads(course.W_k(k)), heads(course.W_v(v))
    scores = qh @ kh.transpose(-2, -1) / (scale or math.sqrt(D // H))
    if mask is not None:
        scores = scores.masked_fill(
            ~(mask.unsqueeze(1) if mask.dim() == 3 else mask), float("-inf")
        )
    out = (scores.softmax(-1) @ vh).transpose(1, 2).reshape(q.shape[0], q.shape[1], D)
    return course.W_o(out) if out_proj else out


def check_multihead(cls) -> str:
    """`cls(d_model, n_heads)` -> a module whose `forward(queries, keys, values,
    mask=None)` is chapter 5's multi-head attention (returning the output, or (output,
    weights)); its projections are named W_q, W_k, W_v and W_o, so the course's weights
    load into it. Outputs and gradients are compared.
    """
    from nmt_lib.attention import causal_mask, lens_to_mask  # chapter 3's
    from nmt_lib.multihead import MultiHeadAttention  # chapter 5's

    torch.manual_seed(0)
    course = MultiHeadAttention(16, 4).eval()
    mine = learner_call("building cls(16, 4)", cls, 16, 4)
    load_course_weights("cls(16, 4)", mine, course)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, 16, generator=gen)
    memory = torch.randn(2, 7, 16, generator=gen)
    cases = {
        "self-attention over 5 tokens, no mask": (x, x, x, None),
        "cross-attention over 7 source tokens with padding (a (B, 1, Tk) mask)": (
            x,
            memory,
            memory,
            lens_to_mask([7, 3], 7),
        ),
        "self-attention with a causal mask": (x, x, x, causal_mask(5).expand(2, 5, 5)),
    }
    for case, (q, k, v, mask) in cases.items():
        q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
        expected = course(q, k, v, mask)
        got = output_of(learner_call(case, mine, q, k, v, mask))
        with torch.no_grad():
            mistakes = {
                (
                    "scale the scores by sqrt(Dh), the width of one head (d_model / "
                    "n_heads), not sqrt(d_model)"
                ): _multihead(course, q, k, v, mask, scale=math.sqrt(16)),
                SPLIT_MISTAKE: _multihead(course, q, k, v, mask, split="reshape"),
                "the merged heads go through the output projection W_o": _multihead(
                    course, q, k, v, mask, out_proj=False
                ),
                "the mask was not applied: masked keys must get weight 0": course(
                    q, k, v
                ),
            }
        named_mistake(f"{case}: the output", got, expected.detach(), mistakes)
        if not torch.as_tensor(got).requires_grad:
            raise CheckFailed(
                f"{case}: your output has no gradient: keep it in autograd (no"
                " .detach(), .data or torch.no_grad())"
            )
        g = torch.randn(expected.shape, generator=gen)
        wanted = torch.autograd.grad((expected * g).sum(), (q, course.W_q.weight))
        found = torch.autograd.grad(
            (got * g).sum(), (q, mine.W_q.weight), allow_unused=True
        )
        for name, f, w in zip(("the queries", "W_q's weight"), found, wanted):
            if f is None:
                raise CheckFailed(
                    f"{case}: no gradient reaches {name}: use W_q on the queries"
                )
            compare(f"{case}: the gradient with respect to {name}", f, w, atol=1e-4)
    return passed("multi-head attention", cases)


def check_sinusoidal_table(fn) -> str:
    """`fn(max_len, d_model)` -> the (max_len, d_model) sinusoidal table, against
    chapter 6's."""
    from nmt_lib.positional import sinusoidal_table  # chapter 6's, imported where used

    sizes = [(5, 4), (50, 16), (200, 64)]
    for max_len, d_model in sizes:
        pos = torch.arange(max_len, dtype=torch.float32)[:, None]
        angles = pos * 10_000.0 ** (-torch.arange(0, d_model, 2) / d_model)
        every = pos * 10_000.0 ** (-torch.arange(d_model) / d_model)
        mistakes = {
            (
                "sin in the even columns and cos in the odd ones, interleaved, not "
                "sin then cos in two halves"
            ): torch.cat([angles.sin(), angles.cos()], dim=1),
            (
                "sin goes in the even columns (0, 2, ...) and cos in the odd ones: "
                "you swapped them"
            ): (torch.stack([angles.cos(), angles.sin()], dim=-1).flatten(1)),
            "columns 2i and 2i + 1 share one frequency, 1 / 10000^(2i / d_model)": (
                torch.where(torch.arange(d_model) % 2 == 0, every.sin(), every.cos())
            ),
        }
        case = f"table for max_len={max_len}, d_model={d_model}"
        named_mistake(
            case,
            learner_call(case, fn, max_len, d_model),
            sinusoidal_table(max_len, d_model),
            mistakes,
            atol=1e-4,
        )
    return passed("sinusoidal table", sizes)


def check_decoder_block(cls) -> str:
    """`cls(d_model, n_heads, d_ff)` -> a pre-norm decoder block: `forward(x (B, T, D),
    memory (B, S, D), src_mask (B, 1, S))` -> (B, T, D), with causal self-attention,
    cross-attention and the feed-forward network, each as x + sublayer(norm(x)). Its
    parts are named self_attn, cross_attn (chapter 5's MultiHeadAttention), ffn (chapter
    7's PositionWiseFFN) and norm1, norm2, norm3 (nn.LayerNorm), so the course's weights
    load.
    """
    from nmt_lib.attention import causal_mask, lens_to_mask

    # chapter 7's
    from nmt_lib.transformer import DecoderBlock, TransformerConfig

    torch.manual_seed(0)
    cfg = TransformerConfig(
        10, 10, d_model=16, n_heads=4, d_ff=32, dropout=0.0, norm_first=True
    )
    course = DecoderBlock(cfg).eval()
    with torch.no_grad():  # norms that are not the identity
        for norm in (course.norm1, course.norm2, course.norm3):
            norm.weight.uniform_(0.5, 1.5), norm.bias.uniform_(-0.3, 0.3)
    mine = learner_call("building cls(16, 4, 32)", cls, 16, 4, 32)
    load_course_weights("cls(16, 4, 32)", mine, course)
    post = DecoderBlock(
        TransformerConfig(10, 10, d_model=16, n_heads=4, d_ff=32, dropout=0.0)
    ).eval()
    post.load_state_dict(course.state_dict())

    def reference(block, x, memory, src_mask, *, causal=True):
        kv = block.cross_attn.project_kv(memory, memory)
        self_mask = causal_mask(x.shape[1]) if causal else None
        return block(x, (*kv, src_mask.unsqueeze(1)), self_mask)

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, 16, generator=gen)
    memory = torch.randn(2, 6, 16, generator=gen)
    cases = {
        "5 target tokens over 6 source tokens, no padding": lens_to_mask([6, 6], 6),
        "5 target tokens over a padded source (lengths 6 and 2)": lens_to_mask(
            [6, 2], 6
        ),
    }
    for case, src_mask in cases.items():
        x_in = x.clone().requires_grad_()
        got = output_of(
            learner_call(case, mine, x_in, memory.clone(), src_mask.clone())
        )
        later = x.clone()
        # only the last token changes
        later[:, -1] = torch.randn(later[:, -1].shape, generator=gen)
        with torch.no_grad():
            moved = output_of(
                learner_call(case, mine, later, memory.clone(), src_mask.clone())
            )
            moved, now = result(case, moved), result(case, got)
            if tuple(moved.shape) == tuple(now.shape) and not torch.allclose(
                moved[:, :-1], now[:, :-1], atol=1e-5
            ):
                raise CheckFailed(
                    f"{case}: earlier positions' outputs changed when only the last"
                    " token changed: self-attention needs the causal mask"
                )
            mistakes = {
                (
                    "pre-norm is x + sublayer(norm(x)); you normalised after the "
                    "residual sum (post-norm)"
                ): reference(post, x, memory, src_mask),
                (
                    "cross-attention must not read padded source positions: pass "
                    "src_mask to it"
                ): reference(course, x, memory, torch.ones_like(src_mask)),
            }
        expected = reference(course, x_in, memory, src_mask)
        named_mistake(f"{case}: the output", got, expected.detach(), mistakes)
        g = torch.randn(expected.shape, generator=gen)
        if not torch.as_tensor(got).requires_grad:
            raise CheckFailed(
                f"{case}: your output has no gradient: keep it in autograd"
            )
        compare(
            f"{case}: the gradient with respect to x",
            torch.autograd.grad((got * g).sum(), x_in)[0],
            torch.autograd.grad((expected * g).sum(), x_in)[0],
            atol=1e-4,
        )
    return passed("pre-norm decoder block", cases)


def check_kv_cache_step(fn) -> str:
    """`fn(attn, y (B, 1, D), past_k, past_v)` -> (output (B, 1, D), k, v): one decoding
    step of self-attention with chapter 5's `attn` (a MultiHeadAttention): project the
    new position with `attn.project_kv`, append its key and value to the cached (B, H,
    t, Dh) ones (None at the first step), attend with `attn.attend_kv`.
    """
    from nmt_lib.multihead import MultiHeadAttention
    from nmt_lib.transformer import KVCache, self_attention  # chapter 7's

    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4).eval()
    gen = torch.Generator().manual_seed(1)
    ys = torch.randn(2, 4, 16, generator=gen)
    # recomputing every position
    full = attn(ys, ys, ys, torch.ones(4, 4, dtype=torch.bool).tril())
    past, cases = None, []
    for t in range(4):
        case = f"step {t + 1} ({t} cached positions)"
        cases.append(case)
        y = ys[:, t : t + 1]
        with torch.no_grad():
            got = parts(
                case,
                learner_call(case, fn, attn, y.clone(), *(past or (None, None))),
                ("output", "k", "v"),
            )
            cache = KVCache(*(past or (None, None)))
            out = self_attention(attn, y, None, cache)
            k, v = cache.k, cache.v
            new_k, new_v = attn.project_kv(y, y)
            if past is not None:
                so_far = "of all positions so far (the cache plus the new one)"
                mistakes = {
                    (
                        "the new key goes after the cached ones: append along the "
                        "time axis, dim 2"
                    ): torch.cat([new_k, past[0]], dim=2),
                    f"return the keys {so_far}": new_k,
                }
                named_mistake(f"{case}: the keys", got[1], k, mistakes)
                mistakes = {f"return the values {so_far}": new_v}
                named_mistake(f"{case}: the values", got[2], v, mistakes)
                alone = (
                    "the new position attends over the cached keys and values and its"
                    " own, not its own alone"
                )
                mistakes = {alone: attn.attend_kv(y, new_k, new_v)}
                named_mistake(f"{case}: the output", got[0], out, mistakes)
            for name, g, e in zip(
                ("the output", "the keys", "the values"), got, (out, k, v)
            ):
                compare(f"{case}: {name}", g, e)
            compare(
                f"{case}: the output against recomputing all positions",
                got[0],
                full[:, t : t + 1],
            )
        past = (k, v)
    return passed("KV-cache step", cases)


def check_beam_step(fn) -> str:
    """`fn(scores (B, K), logp (B, K, V), finished (B, K), eos_id)` -> (scores, beam,
    token), each (B, K) and best first, against chapter 7's `beam_step`."""
    from nmt_lib.decoding import beam_step  # chapter 7's, imported where used

    logp = torch.log_softmax(
        torch.randn(2, 3, 6, generator=torch.Generator().manual_seed(0)), dim=-1
    )
    none = torch.zeros(2, 3, dtype=torch.bool)
    cases = {
        "the first step (one live beam)": (
            torch.tensor([[0.0, float("-inf"), float("-inf")]] * 2),
            none,
        ),
        "three live beams": (
            torch.tensor([[-1.0, -1.5, -2.5], [-0.2, -3.0, -3.1]]),
            none,
        ),
        "finished beams": (
            torch.tensor([[-0.5, -1.5, -2.5], [-1.0, -0.4, -3.0]]),
            torch.tensor([[True, False, False], [False, True, False]]),
        ),
    }
    for case, (scores, finished) in cases.items():
        got = parts(
            case,
            learner_call(case, fn, scores.clone(), logp.clone(), finished.clone(), 2),
            ("scores", "beam", "token"),
        )
        expected = beam_step(scores, logp, finished, 2)
        best = (scores.unsqueeze(-1) + logp).max(-1).values
        best_each = best.sort(-1, descending=True).values
        mistakes = {
            (
                "a finished beam can only continue with <eos>, at no cost: it keeps "
                "its score"
            ): beam_step(scores, logp, torch.zeros_like(finished), 2)[0],
            "add each beam's score to its tokens' log-probabilities before choosing": (
                beam_step(torch.zeros_like(scores), logp, finished, 2)[0]
            ),
            (
                "choose the K best of all K x V candidates, not the best token of "
                "each beam"
            ): (best_each),
        }
        named_mistake(f"{case}, scores", got[0], expected[0], mistakes)
        for name, g, e in zip(("beam", "token"), got[1:], expected[1:]):
            compare(f"{case}, {name}", g, e)
    return passed("beam step", cases)
