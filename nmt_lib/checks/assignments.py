"""The public graders of the three assignments' tasks, which no chapter prints: a
sliding-window mask, the ALiBi bias and a multi-head attention with both (A1); a
repetition penalty, greedy decoding with it and an n-best beam search (A2); runs that
beat the chapters' recipe in a fixed budget, with an ablation table (A3). Each checks a
learner's answer against the chapters' code where the two must agree, and against
properties that define the task elsewhere; the teacher's hidden cases compare every
value (`grading/hidden.py`)."""

import functools
from pathlib import Path

import torch

from nmt_lib.checks.core import (
    CheckFailed,
    compare,
    gradients_of,
    learner_call,
    passed,
    result,
    same,
)
from nmt_lib.checks.transformer import load_course_weights, output_of


# ---- A1: attention with a sliding window and a linear bias ----
def check_window_mask(fn) -> str:
    """`fn(num_queries, num_keys, window)` -> the (Tq, Tk) boolean mask that lets the
    query at position p (the queries are the last Tq of the Tk positions) see keys p -
    window + 1 .. p."""
    from nmt_lib.attention import causal_mask  # chapter 3's

    t = torch.tensor
    cases = {
        "4 queries, 4 keys, window 2": (
            (4, 4, 2),
            t([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]),
        ),
        "1 query (the newest of 5 positions, as with a KV cache), window 3": (
            (1, 5, 3),
            t([[0, 0, 1, 1, 1]]),
        ),
        "3 queries, 5 keys, window 2": (
            (3, 5, 2),
            t([[0, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]]),
        ),
        "window 1: each query sees itself": ((3, 3, 1), torch.eye(3)),
        "a window wider than the keys: chapter 3's causal mask": (
            (3, 6, 9),
            causal_mask(3, 6, offset=3),
        ),
        "a window as wide as the keys: chapter 3's causal mask": (
            (5, 5, 5),
            causal_mask(5),
        ),
    }
    for case, ((tq, tk, window), expected) in cases.items():
        got = result(case, learner_call(case, fn, tq, tk, window))
        if got.dtype != torch.bool:
            raise CheckFailed(
                f"{case}: return a boolean mask (True = may attend), got {got.dtype}"
            )
        if tuple(got.shape) == (tq, tk):
            later = torch.ones(tq, tk, dtype=torch.bool).triu(tk - tq + 1)
            if (got & later).any():
                raise CheckFailed(
                    f"{case}: a query sees a later key; the window looks back only (the"
                    " queries are the last Tq positions)"
                )
            seen = got.sum(-1)
            if (seen > window).any():
                raise CheckFailed(
                    f"{case}: a query sees {int(seen.max())} keys; the window holds"
                    f" itself and the window - 1 keys before it, {window} in all"
                )
        compare(case, got, expected.bool())
    return passed("sliding-window mask", cases)


def check_alibi_bias(fn) -> str:
    """`fn(n_heads, num_queries, num_keys)` -> the (H, Tq, Tk) ALiBi bias -m_h |p - j|,
    m_h = 2^(-8h/H) for h = 1..H, the queries at the last Tq positions."""
    m1, m2, m = 2.0**-4, 2.0**-8, 2.0**-8
    t = torch.tensor
    cases = {
        "1 head, 3 queries, 3 keys (m = 1/256)": (
            (1, 3, 3),
            t([[[0, -m, -2 * m], [-m, 0, -m], [-2 * m, -m, 0]]]),
        ),
        "2 heads (m = 1/16 and 1/256), 1 query, 4 keys": (
            (2, 1, 4),
            t([[[-3 * m1, -2 * m1, -m1, 0]], [[-3 * m2, -2 * m2, -m2, 0]]]),
        ),
        "4 heads, 2 queries, 3 keys": (
            (4, 2, 3),
            t(
                [
                    [[-s, 0, -s], [-2 * s, -s, 0]]
                    for s in (2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8)
                ]
            ),
        ),
    }
    for case, ((h, tq, tk), expected) in cases.items():
        got = result(case, learner_call(case, fn, h, tq, tk))
        if not got.is_floating_point():
            raise CheckFailed(f"{case}: return a float tensor, got {got.dtype}")
        if tuple(got.shape) == tuple(expected.shape):
            if (got > 0).any():
                raise CheckFailed(
                    f"{case}: the bias is a penalty, 0 at the query's own position and"
                    " more negative with distance; yours has positive values"
                )
            # slope 2^0 = 1 for the first head
            from_zero = expected[0, 0] * 2.0 ** (8 / h)
            if not same(got[0, 0], expected[0, 0], atol=1e-6) and same(
                got[0, 0], from_zero, atol=1e-6
            ):
                raise CheckFailed(
                    f"{case}: your slopes are one step off in the geometric sequence: "
                    "the first head's slope is the sequence's first term, not 1"
                )
        compare(case, got, expected)
    return passed("ALiBi bias", cases)


def _slices(course, x, window):
    """Chapter 5's multi-head attention of each position over its window, one position
    at a time."""
    rows = [
        course(
            x[:, t : t + 1],
            x[:, max(0, t - window + 1) : t + 1],
            x[:, max(0, t - window + 1) : t + 1],
        )
        for t in range(x.shape[1])
    ]
    return torch.cat(rows, dim=1)


def check_local_attention(cls) -> str:
    """`cls(d_model, n_heads, window=None, alibi=True)`: multi-head self-attention with
    the ALiBi bias (when `alibi`) and a sliding window (when `window`), `forward(x,
    mask=None)` -> (B, T, D). Without the bias it must be chapter 5's attention; the
    bias is checked by what it must do."""
    from nmt_lib.attention import causal_mask, lens_to_mask  # chapter 3's
    from nmt_lib.multihead import MultiHeadAttention  # chapter 5's

    torch.manual_seed(0)
    course = MultiHeadAttention(16, 4).eval()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 6, 16, generator=gen)
    plain = learner_call("building cls(16, 4, alibi=False)", cls, 16, 4, alibi=False)
    load_course_weights("cls(16, 4, alibi=False)", plain, course)
    agree = {
        "no bias, no mask": (None, course(x, x, x)),
        "no bias, a padding mask (B, 1, T)": (
            lens_to_mask([6, 4], 6),
            course(x, x, x, lens_to_mask([6, 4], 6)),
        ),
        "no bias, a causal mask (T, T)": (
            causal_mask(6),
            course(x, x, x, causal_mask(6).expand(2, 6, 6)),
        ),
    }
    for case, (mask, expected) in agree.items():
        compare(
            f"{case}: against chapter 5's MultiHeadAttention",
            output_of(learner_call(case, plain, x, mask)),
            expected.detach(),
        )
    for window in (1, 3):
        case = f"no bias, window {window}"
        mine = learner_call(
            f"building cls(16, 4, window={window}, alibi=False)",
            cls,
            16,
            4,
            window=window,
            alibi=False,
        )
        load_course_weights(case, mine, course)
        compare(
            f"{case}: against chapter 5's attention of each position over its window",
            output_of(learner_call(case, mine, x)),
            _slices(course, x, window).detach(),
        )
    local = learner_call("building cls(16, 4, window=3)", cls, 16, 4, window=3)
    load_course_weights("cls(16, 4, window=3)", local, course)
    (dx,) = gradients_of("ALiBi, window 3", local, [x], torch.ones(2, 6, 16))
    if dx is None:
        raise CheckFailed(
            "ALiBi, window 3: no gradient reaches the input: keep it in autograd"
        )
    out = output_of(learner_call("ALiBi, window 3", local, x))
    with torch.no_grad():
        compare(
            "ALiBi, window 3: position 0 sees only itself, where the bias is 0",
            out[:, :1],
            course(x[:, :1], x[:, :1], x[:, :1]),
        )
        compare(
            "ALiBi, window 3: the last position over its window alone (the bias depends"
            " on distance only)",
            out[:, -1],
            output_of(
                learner_call("ALiBi, window 3, the last 3 positions", local, x[:, -3:])
            )[:, -1],
        )
        if torch.allclose(out[:, 1:], _slices(course, x, 3)[:, 1:], atol=1e-5):
            raise CheckFailed(
                "ALiBi, window 3: the output is chapter 5's attention: the bias was not"
                " added"
            )
        full = learner_call("building cls(16, 4)", cls, 16, 4)
        load_course_weights("cls(16, 4)", full, course)
        both = output_of(learner_call("ALiBi, no window", full, x))
        if torch.allclose(both, course(x, x, x), atol=1e-5):
            raise CheckFailed(
                "ALiBi, no window: the output is chapter 5's attention: the bias was"
                " not added"
            )
    return passed(
        "multi-head attention with ALiBi and a window", [*agree, 1, 3, "alibi"]
    )


# ---- A2: decoding with a repetition penalty, and the n best ----
def check_repetition_penalty(fn) -> str:
    """`fn(logits (B, V), generated (B, t), penalty)` -> new logits: each row's
    generated tokens have their positive logits divided by `penalty` and their negative
    ones multiplied by it, once however often they occur.
    """
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0, -2.0], [1.0, 1.0, -0.5, 0.0, 4.0]])
    cases = {
        "one token each": (
            torch.tensor([[3], [2]]),
            2.0,
            [[2.0, -1.0, 0.5, 1.5, -2.0], [1.0, 1.0, -1.0, 0.0, 4.0]],
        ),
        "a token generated twice is penalised once": (
            torch.tensor([[0, 0, 1]]),
            2.0,
            [[1.0, -2.0, 0.5, 3.0, -2.0]],
        ),
        "each row its own tokens": (
            torch.tensor([[4, 2], [0, 4]]),
            1.5,
            [[2.0, -1.0, 0.5 / 1.5, 3.0, -3.0], [1 / 1.5, 1.0, -0.5, 0.0, 4 / 1.5]],
        ),
        "penalty 1 changes nothing": (
            torch.tensor([[0, 1], [2, 3]]),
            1.0,
            logits.tolist(),
        ),
        "nothing generated yet": (
            torch.zeros(2, 0, dtype=torch.long),
            3.0,
            logits.tolist(),
        ),
    }
    for case, (generated, penalty, expected) in cases.items():
        rows = logits[: generated.shape[0]]
        before = rows.clone()
        got = result(case, learner_call(case, fn, rows, generated, penalty))
        if not torch.equal(rows, before):
            raise CheckFailed(
                f"{case}: your function changed the logits it was given; return new"
                " ones"
            )
        expected = torch.tensor(expected)
        negative = (before < 0) & (got > before)
        if tuple(got.shape) == tuple(expected.shape) and negative.any() and penalty > 1:
            raise CheckFailed(
                f"{case}: a negative logit went up, making a repeated token more"
                " likely: what must scaling do to a negative number to lower it?"
            )
        compare(case, got, expected)
    return passed("repetition penalty", cases)


def random_translator(seed: int = 0, *, vocab: int = 12, sharp: float = 8.0):
    """A small untrained Transformer whose output layer is scaled by `sharp`, so that
    its choices are far from ties; in eval mode. Tokens: 0 <pad>, 1 <bos>, 2 <eos>."""
    from nmt_lib.transformer import Transformer, TransformerConfig

    torch.manual_seed(seed)
    model = Transformer(
        TransformerConfig(
            vocab, vocab, d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0
        )
    )
    with torch.no_grad():
        model.decoder.dense.weight.mul_(sharp)
    return model.eval()


def sources(seed: int = 0, lengths=(5, 3, 6), vocab: int = 12):
    """A padded (B, S) batch of random source ids (3 .. vocab - 1) of the given lengths,
    and the lengths."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for i, n in enumerate(lengths):
        src[i, :n] = torch.randint(3, vocab, (n,), generator=gen)
    return src, torch.tensor(lengths)


def token_lists(case: str, got, batch: int) -> list:
    if not isinstance(got, (list, tuple)) or len(got) != batch:
        raise CheckFailed(
            f"{case}: return one token list per sentence ({batch}), got"
            f" {type(got).__name__}"
        )
    return [[int(t) for t in seq] for seq in got]


def check_penalised_greedy(fn, penalty_fn) -> str:
    """`fn(model, src, src_len, *, bos_id, eos_id, max_len, penalty)` -> per sentence
    the greedy tokens (no <bos>, cut before <eos>), each step choosing the most likely
    token after `penalty_fn` (the learner's task 1) has penalised the sentence's tokens
    so far. With penalty 1 it is chapter 7's `greedy_decode`.
    """
    from nmt_lib.decoding import greedy_decode  # chapter 7's

    model, (src, src_len) = random_translator(), sources()
    ids = dict(bos_id=1, eos_id=2, max_len=8)
    plain = greedy_decode(model, src, src_len, **ids).tokens
    case = "penalty 1: chapter 7's greedy_decode"
    got = token_lists(
        case, learner_call(case, fn, model, src, src_len, **ids, penalty=1.0), 3
    )
    if got != plain:
        raise CheckFailed(f"{case}: got {got}, expected {plain}")
    case = "penalty 3, three sentences"
    batch = token_lists(
        case, learner_call(case, fn, model, src, src_len, **ids, penalty=3.0), 3
    )
    for i, tokens in enumerate(batch):
        one = token_lists(
            f"sentence {i} alone",
            learner_call(
                f"sentence {i} alone",
                fn,
                model,
                src[i : i + 1, : int(src_len[i])],
                src_len[i : i + 1],
                **ids,
                penalty=3.0,
            ),
            1,
        )[0]
        if one != tokens:
            raise CheckFailed(
                f"penalty 3: sentence {i} alone gives {one}, in the batch {tokens}:"
                " penalise each sentence's own tokens only"
            )
        prefix = [1] + tokens
        with torch.no_grad():
            # (T, V)
            logits = model(src[i : i + 1], src_len[i : i + 1], torch.tensor([prefix]))[
                0
            ]
        for t in range(len(tokens) + (len(tokens) < ids["max_len"])):
            step = learner_call(
                "your repetition_penalty",
                penalty_fn,
                logits[t : t + 1].clone(),
                torch.tensor([tokens[:t]], dtype=torch.long),
                3.0,
            )
            choice = int(result("your repetition_penalty", step).argmax(-1))
            wanted = tokens[t] if t < len(tokens) else 2
            if choice != wanted:
                raise CheckFailed(
                    f"{case}: sentence {i}, step {t + 1}: the penalised logits (your"
                    f" task 1) pick token {choice}, your decoding chose {wanted}"
                )
    if batch == plain:
        raise CheckFailed(
            f"{case}: the same tokens as without a penalty: the penalty was not applied"
        )
    return passed("greedy decoding with a repetition penalty", ["penalty 1", *range(3)])


def check_n_best(fn) -> str:
    """`fn(model, src, src_len, *, bos_id, eos_id, beam_size, n, max_len, alpha)` -> per
    sentence a list of n (tokens, score) pairs, best first: the n best of the final
    beams of chapter 7's beam search, each scored by its summed log-probability /
    length**alpha (the length counts <eos>)."""
    from nmt_lib.decoding import beam_search, sequence_scores  # chapter 7's

    model, (src, src_len) = random_translator(1), sources(1)
    for beam, n, alpha in ((4, 1, 1.0), (4, 3, 1.0), (3, 3, 0.0)):
        case = f"beam {beam}, n {n}, alpha {alpha:g}"
        ids = dict(bos_id=1, eos_id=2, max_len=8)
        got = learner_call(
            case, fn, model, src, src_len, **ids, beam_size=beam, n=n, alpha=alpha
        )
        if not isinstance(got, (list, tuple)) or len(got) != 3:
            raise CheckFailed(
                f"{case}: return one list per sentence (3), got {type(got).__name__}"
            )
        best = beam_search(
            model, src, src_len, **ids, beam_size=beam, alpha=alpha
        ).tokens
        for i, hyps in enumerate(got):
            if (
                not isinstance(hyps, (list, tuple))
                or len(hyps) != n
                or not all(len(h) == 2 for h in hyps)
            ):
                raise CheckFailed(
                    f"{case}: sentence {i}: return a list of n = {n} (tokens, score)"
                    " pairs"
                )
            tokens, scores = (
                [[int(t) for t in h[0]] for h in hyps],
                [float(h[1]) for h in hyps],
            )
            if tokens[0] != best[i]:
                raise CheckFailed(
                    f"{case}: sentence {i}: your best is {tokens[0]}, chapter 7's beam"
                    f" search returns {best[i]}"
                )
            if (
                scores != sorted(scores, reverse=True)
                or len({tuple(t) for t in tokens}) < n
            ):
                raise CheckFailed(
                    f"{case}: sentence {i}: the list should be n different"
                    " translations, best first"
                )
            expected = sequence_scores(
                model,
                src[i : i + 1].expand(n, -1),
                src_len[i : i + 1].expand(n),
                [(t, len(t) < ids["max_len"]) for t in tokens],
                **{k: ids[k] for k in ("bos_id", "eos_id")},
                alpha=alpha,
            )
            compare(
                f"{case}: sentence {i}, the scores against chapter 7's sequence_scores",
                scores,
                expected,
                atol=1e-4,
            )
    case = "n = 3 from a beam of 2"
    try:
        fn(
            model,
            src,
            src_len,
            bos_id=1,
            eos_id=2,
            max_len=8,
            beam_size=2,
            n=3,
            alpha=1.0,
        )
    except ValueError:
        pass
    except Exception as e:
        raise CheckFailed(
            f"{case}: raise a ValueError that says why, not {type(e).__name__}"
        ) from None
    else:
        raise CheckFailed(
            f"{case}: raise a ValueError that says why (the beam holds 2 translations)"
        )
    return passed("n-best beam search", range(4))


# ---- A3: beat the chapters' recipe in a fixed budget, graded from the runs'
# checkpoints ----
# where a run's files lie, beside the notebook: SETTING.seedS.pt, .log and .json
RUNS = "runs/a3"
BUDGET = (
    630  # seconds of training a run may have: ten minutes, and room for the last update
)
REFERENCE = (
    "--max-pairs 40000 --min-freq 3 --d-model 128 --heads 4 --d-ff 512 --layers 2"
    " --dropout 0.1 --norm-first --label-smoothing 0.1 --warmup 100 --lr-factor 0.3"
    " --max-tokens 1000 --tokens-per-update 800 --epochs 1000 --time-limit 10 --threads"
    " 2 --device cpu"
)
FREE = (
    "seed",
    "time_limit",
    "checkpoint_every",
    "keep_last",
)  # a run's settings that its seeds may differ in
COLUMNS = ("valid BLEU", "minus reference", "low", "high")


def find_runs(folder=RUNS) -> dict:
    """{(setting, seed): path} for each checkpoint SETTING.seedS.pt in `folder` (none if
    it is missing)."""
    import re

    runs = {}
    for path in sorted(Path(folder).glob("*.pt")):
        if m := re.fullmatch(r"([a-z0-9-]+)\.seed(\d+)\.pt", path.name):
            runs[m[1], int(m[2])] = path
    return runs


@functools.cache
def _data():
    """`chapter_data()`, read once for the many checks of one grading."""
    from nmt_lib.recipes import chapter_data

    return chapter_data()


@functools.lru_cache(maxsize=16)
def _checkpoint(path: str, stamp: tuple):
    from nmt_lib.run.checkpoint import load_checkpoint

    return load_checkpoint(path, device="cpu")


def _load(runs: dict) -> dict:
    """Each run's checkpoint, read safely onto the CPU (once while the file is
    unchanged); a file that is not one fails the check, named."""
    from nmt_lib.run.checkpoint import CheckpointError

    loaded = {}
    for key, path in runs.items():
        try:
            stat = Path(path).stat()
            loaded[key] = _checkpoint(str(path), (stat.st_mtime_ns, stat.st_size))
        except (CheckpointError, OSError) as e:
            raise CheckFailed(f"{path}: {e}") from None
    return loaded


def _settings(ckpt) -> dict:
    """What a run chose: its model, its parts and its training settings, less the ones
    seeds may differ in."""
    p = ckpt.payload
    return {
        "config": p["config"],
        "parts": p["parts"],
        "train": {k: v for k, v in p["train"].items() if k not in FREE},
    }


def reference_settings(vocab_sizes: tuple) -> dict:
    """The settings the reference command gives a run (the trainer's own parser reads
    it, `python -m speedrun.train`'s), for vocabularies of `vocab_sizes`."""
    from dataclasses import asdict

    from nmt_lib.run.cli import build_parser
    from nmt_lib.run.trainer import new_settings
    from nmt_lib.transformer import TransformerConfig
    from speedrun.train import SpeedrunSettings

    parser = build_parser(SpeedrunSettings)
    args = parser.parse_args(["train", "--out", "reference.pt", *REFERENCE.split()])
    train, model, _, parts = new_settings(args, parser, SpeedrunSettings)
    config = asdict(TransformerConfig(*vocab_sizes, **model))
    return {
        "config": config,
        "parts": asdict(parts),
        "train": {k: v for k, v in asdict(train).items() if k not in FREE},
    }


def data_settings() -> dict:
    """The data options a run must have: chapter 7's, as `chapter_data()` reads them."""
    from nmt_lib.base.course import quick

    return {
        **quick(dict(max_pairs=40_000, min_freq=3), max_pairs=6_000),
        "valid_frac": 0.05,
        "test_frac": 0.05,
        "seed": 0,
        "tokenizer": "word",
        "preprocess": "course",
        "exclude": None,
    }


def _refuse_other_data(run: str, ckpt, data, options: dict | None = None):
    """`CheckFailed` unless the run `run` has `data`'s vocabularies (and, given, the
    data `options`)."""
    if (
        options is not None
        and {k: ckpt.payload["data"].get(k) for k in options} != options
    ) or (
        (ckpt.src_vocab.idx_to_token, ckpt.tgt_vocab.idx_to_token)
        != (data.src_vocab.idx_to_token, data.tgt_vocab.idx_to_token)
    ):
        raise CheckFailed(
            f"{run} was trained on other data: use chapter 7's (--max-pairs 40000"
            " --min-freq 3, the split and tokens as they come)"
        )


def check_runs(runs: dict, chosen) -> str:
    """The rules of assignment 3, for every run in `runs` (`find_runs`): at most
    `BUDGET` seconds of training, its sittings' included (`speedrun.train` records
    them), every sitting on the CPU with 2 threads and all on one machine, its file's
    seed, chapter 7's data and vocabularies, no two runs with the same weights; the
    reference with seeds 1 and 2, its command's settings and the whole budget used;
    `chosen` another setting with seeds 1 and 2 and one set of settings."""
    import hashlib
    import re

    from nmt_lib.base.course import pick

    if not runs:
        raise CheckFailed(
            f"no runs in {RUNS}/: train them first, with the commands above"
        )
    data, loaded, machines, weights, options = (
        _data(),
        _load(runs),
        set(),
        {},
        data_settings(),
    )
    for (name, seed), ckpt in loaded.items():
        run, p = f"{name}.seed{seed}", ckpt.payload
        if "sessions" not in p["progress"]:
            raise CheckFailed(
                f"{run} does not say where it trained: train it with"
                " `python -m speedrun.train`, as the rules say"
            )
        seconds = max(
            p["progress"]["seconds"],
            sum(s["seconds"] for s in p["progress"]["sessions"]),
        )
        if seconds > BUDGET:
            raise CheckFailed(
                f"{run} trained {seconds:.0f} s: the budget is {BUDGET} s"
            )
        for session in p["progress"]["sessions"]:
            if not re.search(r", \d+ cores, 2 threads$", session["machine"]):
                raise CheckFailed(
                    f"{run} trained a sitting on {session['machine']}: every sitting"
                    " runs on the CPU with --threads 2"
                )
            machines.add(session["machine"])
        if p["train"]["seed"] != seed:
            raise CheckFailed(
                f"{run} was trained with --seed {p['train']['seed']}: name it by its"
                " seed"
            )
        _refuse_other_data(run, ckpt, data, options)
        digest = hashlib.sha1(
            b"".join(t.numpy().tobytes() for t in ckpt.model.state_dict().values())
        ).digest()
        if digest in weights:
            raise CheckFailed(
                f"{run} holds the same weights as {weights[digest]}: hand in each run"
                " once"
            )
        weights[digest] = run
    if len(machines) > 1:
        raise CheckFailed(
            f"the runs were trained on {len(machines)} machines"
            f" ({'; '.join(sorted(machines))}): train all of them on one"
        )
    sizes = (len(data.src_vocab), len(data.tgt_vocab))
    reference = reference_settings(sizes)
    for name, wanted in (("reference", reference), (chosen, None)):
        if not isinstance(name, str) or name == "reference" and wanted is None:
            raise CheckFailed(
                f"`chosen` is {name!r}: name the setting you chose, as its runs are"
                " named"
            )
        seeds = {
            seed: ckpt for (setting, seed), ckpt in loaded.items() if setting == name
        }
        if not {1, 2} <= set(seeds):
            raise CheckFailed(
                f"{name} needs runs with seeds 1 and 2; {RUNS}/ has "
                f"{', '.join(f'seed {s}' for s in sorted(seeds)) or 'none'}"
            )
        for seed in (1, 2):
            found = _settings(seeds[seed])
            wanted = wanted or found
            if found != wanted:
                part = next(k for k in found if found[k] != wanted[k])
                changed = sorted(
                    k for k in found[part] if found[part][k] != wanted[part].get(k)
                )
                raise CheckFailed(
                    f"{name}.seed{seed}: its {part} settings {', '.join(changed)}"
                    " differ from "
                    + (
                        "the reference command's"
                        if name == "reference"
                        else "its seed 1's"
                    )
                )
            if name == "reference" and seeds[seed].payload["progress"][
                "seconds"
            ] < pick(BUDGET - 60, 0):
                raise CheckFailed(
                    f"reference.seed{seed} trained"
                    f" {seeds[seed].payload['progress']['seconds']:.0f} s: the"
                    " reference has the whole ten minutes"
                )
        if name != "reference" and wanted == reference:
            raise CheckFailed(
                f"{name} has the reference's settings: choose a setting that changes"
                " something"
            )
    return f"{len(runs)} runs, each within the rules"


def runs_bleu(runs: dict, split: str) -> dict:
    """{(setting, seed): `BleuResult`} of each run's checkpoint on `split` of
    `chapter_data()`: greedy, max_len 30, as chapter 7 measures it."""
    from nmt_lib.decoding import evaluate_bleu

    data, loaded = _data(), _load(runs)
    for (name, seed), ckpt in loaded.items():
        _refuse_other_data(f"{name}.seed{seed}", ckpt, data)
    return {
        key: evaluate_bleu(
            ckpt.model,
            getattr(data.splits, split),
            data.src_vocab,
            data.tgt_vocab,
            max_len=30,
        )
        for key, ckpt in loaded.items()
    }


def check_beats_reference(runs: dict, chosen, split: str = "valid") -> str:
    """The runs keep the rules (`check_runs`), and `chosen`'s mean BLEU over seeds 1 and
    2 on `split` is above the reference's."""
    check_runs(runs, chosen)
    picked = {
        key: path
        for key, path in runs.items()
        if key[0] in ("reference", chosen) and key[1] in (1, 2)
    }
    bleu = {key: r.bleu for key, r in runs_bleu(picked, split).items()}
    mine, base = ((bleu[name, 1] + bleu[name, 2]) / 2 for name in (chosen, "reference"))
    if not mine > base:
        raise CheckFailed(
            f"{chosen}: {split} BLEU {mine:.2f} over seeds 1 and 2, not above the"
            f" reference's ({base:.2f})"
        )
    return (
        f"{chosen}: {split} BLEU {mine:.2f} over seeds 1 and 2, {mine - base:+.2f}"
        " against the reference"
    )


def check_ablation(table, chosen) -> str:
    """`table`: a pandas DataFrame indexed by (setting, seed), one row per run other
    than the reference's: at least 3 settings, `chosen` among them with seeds 1 and 2,
    and the columns `COLUMNS`: validation BLEU, its difference to the reference run of
    the same seed, and the 95% paired-bootstrap interval of that difference (chapter
    4a)."""
    import pandas as pd

    if not isinstance(table, pd.DataFrame):
        raise CheckFailed(
            f"`ablation` should be a pandas DataFrame, got {type(table).__name__}"
        )
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise CheckFailed(
            f"`ablation` lacks the columns {', '.join(missing)}; it needs"
            f" {', '.join(COLUMNS)}"
        )
    if table.index.nlevels != 2 or table.index.duplicated().any():
        raise CheckFailed(
            "`ablation` should have one row per run, indexed by (setting, seed)"
        )
    settings = set(table.index.get_level_values(0)) - {"reference"}
    if len(settings) < 3:
        raise CheckFailed(
            f"`ablation` has {len(settings)} settings besides the reference; compare at"
            " least 3"
        )
    if not {(chosen, 1), (chosen, 2)} <= set(table.index):
        raise CheckFailed(
            f"`ablation` needs the rows ({chosen!r}, 1) and ({chosen!r}, 2), the chosen"
            " setting's two seeds"
        )
    values = table[list(COLUMNS)].astype(float)
    if not torch.isfinite(torch.tensor(values.to_numpy())).all():
        raise CheckFailed("`ablation` has a missing or infinite number")
    for name, row in values.iterrows():
        if not row["low"] <= row["minus reference"] <= row["high"]:
            raise CheckFailed(
                f"`ablation`, row {name}: the difference {row['minus reference']:+.1f}"
                f" lies outside its interval ({row['low']:+.1f} to {row['high']:+.1f})"
            )
    return (
        f"{len(settings)} settings, each run with its interval against the reference of"
        " its seed"
    )
