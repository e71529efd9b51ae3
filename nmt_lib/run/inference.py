"""A trained checkpoint at work, for the command line's `translate` and `evaluate`:
translating lines as they arrive, and scoring a held-out split with sacreBLEU."""

import warnings
from dataclasses import dataclass
from functools import partial

from nmt_lib.run.corpus import ParallelCorpus, detokenize, keeps_case, preparer
from nmt_lib.run.corpus import writes_unknowns
from nmt_lib.run.corpus import split_settings
from nmt_lib.decoding import beam_search, evaluate_bleu, translate
from nmt_lib.fast import greedy_decode_fast
from nmt_lib.run.testsets import read_tatoeba_test
from nmt_lib.unknowns import UNK, replace_unknowns

# the whole corpus runs longer than the chapters' sentences (decoding's MAX_LEN, 50)
MAX_OUTPUT = 80
# Lines read at once from a file or pipe: `translate()` sorts them by length, 1.6-1.7
# times the speed of input order (the Benchmarks page); a typed line goes at once.
SORTED_LINES = 1024


def int8(ckpt):
    """`ckpt` with its linear layers in int8 (PyTorch's dynamic quantisation); CPU
    only."""
    import torch
    from torch.ao.quantization import quantize_dynamic

    if next(ckpt.model.parameters()).device.type != "cpu":
        raise ValueError("--int8 runs on the CPU: add --device cpu")
    with warnings.catch_warnings():  # torch.ao's notice that the API moves to torchao
        warnings.simplefilter("ignore")
        ckpt.model = quantize_dynamic(ckpt.model, {torch.nn.Linear}, dtype=torch.qint8)
    ckpt.int8 = True
    return ckpt


def search_for(beam: int, alpha: float = 1.0):
    """Greedy decoding for beam 1, else beam search: log p / length ** `alpha`."""
    return (
        greedy_decode_fast
        if beam == 1
        else partial(beam_search, beam_size=beam, alpha=alpha)
    )


def translate_lines(
    ckpt,
    lines,
    *,
    beam: int = 1,
    alpha: float = 1.0,
    batch_size: int = 64,
    max_len: int = MAX_OUTPUT,
    tokenized: bool = False,
    first: int = 1,
    warn=None,
) -> list[str]:
    """Raw sentences -> one translation line each (empty lines stay empty). A line over
    the model's positions is cut, and `warn(message)` names it (counted from `first`);
    `tokenized` writes the model's pieces, separated by spaces."""
    prepare = preparer(ckpt.payload["data"])
    french = ckpt.payload["data"].get("french_spacing", True)
    raw = keeps_case(ckpt.payload["data"])  # the text as written: nothing to join up
    max_src = ckpt.model.cfg.max_len - 1  # <bos>, <eos> take a position
    max_len = min(max_len, max_src)
    # a byte-order mark is not a word
    lines = [line.rstrip("\r\n").lstrip("\ufeff") for line in lines]
    keep = [i for i, line in enumerate(lines) if line.strip()]
    # tokenizing to count costs time: only to warn
    for i in keep if warn is not None else ():
        tokens = len(ckpt.src_vocab.split(prepare(lines[i])))
        if tokens > max_src:
            warn(
                f"line {first + i:,} has {tokens:,} tokens, more than the model's"
                f" {max_src:,}: only its first {max_src:,} were translated"
            )
    with warnings.catch_warnings():  # said above, line by line
        warnings.simplefilter("ignore")
        out = translate(
            ckpt.model,
            [lines[i] for i in keep],
            ckpt.src_vocab,
            AsPieces(ckpt.tgt_vocab) if tokenized else ckpt.tgt_vocab,
            max_len=max_len,
            max_src_len=max_src,
            batch_size=batch_size,
            search=search_for(beam, alpha),
            prepare=prepare,
        )
    if not tokenized:
        out = copy_unknowns(ckpt, [prepare(lines[i]) for i in keep], out)
    result = [""] * len(lines)
    for i, text in zip(keep, out):
        result[i] = " ".join(
            (text if tokenized or raw else detokenize(text, french=french)).split()
        )
    return result


class AsPieces:
    """A target vocabulary that writes the tokens the model wrote, joined by spaces,
    instead of text."""

    def __init__(self, vocab):
        self.vocab = vocab

    def __getattr__(self, name):
        return getattr(self.vocab, name)

    def detokenize(self, tokens) -> str:
        return " ".join(tokens)


def count_unknowns(hypotheses) -> int:
    """`<unk>` in translations (SentencePiece writes an unknown piece as ⁇ unless told
    otherwise)."""
    return sum(h.count(UNK) + h.count("\u2047") for h in hypotheses)


def copy_unknowns(ckpt, sources, hypotheses) -> list[str]:
    """Word-level output with each `<unk>` replaced by the source word it attends to
    most (chapter 8b); subword output, which has no `<unk>` to replace, as it is."""
    if not writes_unknowns(ckpt.tgt_vocab) or not count_unknowns(hypotheses):
        return list(hypotheses)
    replaced = replace_unknowns(
        ckpt.model,
        [ckpt.src_vocab.split(s) for s in sources],
        [h.split() for h in hypotheses],
        ckpt.src_vocab,
        ckpt.tgt_vocab,
    )
    return [" ".join(tokens) for tokens in replaced]


@dataclass(frozen=True)
class Evaluation:
    """What `evaluate_checkpoint` (a held-out split) and `evaluate_public` (a public
    test set) measure, and `evaluate` prints (`report`) and records."""

    split: str
    sentences: int
    references: int
    beam: int
    alpha: float | None  # the length penalty of beam search; None for greedy
    sacrebleu: float
    signature: str
    score_line: str  # sacreBLEU's own: the score, its n-gram precisions and BP
    chrf: float
    chrf_signature: str
    unknown: int  # <unk> in the output
    copied: bool  # each replaced by a source word (copy through attention)
    sacrebleu_with_unknowns: float  # the score before they were replaced
    token_bleu: float | None = None  # the course's, on its tokens (a held-out split)
    hypotheses: list[str] | None = None  # a public test's, line by line
    reference_lines: list[str] | None = None

    def report(self) -> list[str]:
        """What `evaluate` prints, a line each."""
        search = search_name(self.beam, self.alpha)
        what = (
            f"{self.split}: {self.sentences:,} sentences, one reference each, {search}"
            if self.token_bleu is None
            else (
                f"{self.split} split: {self.sentences:,} distinct sentences,"
                f" {self.references:,} references, {search}"
            )
        )
        unknown = (
            f"{self.unknown:,} <unk> in the output, each replaced by the source word"
            " that the last layer's cross-attention weighs most (copy through"
            " attention, chapter 8b); left in, they score"
            f" {self.sacrebleu_with_unknowns:.2f}"
            if self.copied
            else f"{self.unknown:,} <unk> in the output"
        )
        lines = [
            what,
            unknown,
            self.score_line,
            f"signature: {self.signature}",
            f"chrF = {self.chrf:.2f} (signature: {self.chrf_signature})",
        ]
        if self.token_bleu is not None:
            lines.append(
                "course token BLEU (tokenize='none' on the course's tokens):"
                f" {self.token_bleu:.1f}"
            )
        return lines


def scored(
    hyps, streams, *, lowercase: bool, beam: int, alpha: float, before=None, **what
):
    """An `Evaluation` of `hyps` against `streams` (sacreBLEU's: one list per
    reference) with sacreBLEU's BLEU (13a) and chrF; `before`, the hypotheses before
    their `<unk>` were copied, if they were; `what`, the rest of its fields."""
    import sacrebleu  # the standard BLEU; installed with the course

    bleu, chrf = (
        sacrebleu.BLEU(lowercase=lowercase),
        sacrebleu.CHRF(lowercase=lowercase),
    )
    score = bleu.corpus_score(hyps, streams)
    return Evaluation(
        sentences=len(hyps),
        beam=beam,
        alpha=alpha if beam > 1 else None,
        sacrebleu=score.score,
        signature=str(bleu.get_signature()),
        score_line=str(score),
        chrf=chrf.corpus_score(hyps, streams).score,
        chrf_signature=str(chrf.get_signature()),
        copied=before is not None,
        sacrebleu_with_unknowns=(
            score.score if before is None else bleu.corpus_score(before, streams).score
        ),
        **what,
    )


def evaluate_checkpoint(
    ckpt,
    *,
    data_path=None,
    split: str = "test",
    beam: int = 1,
    alpha: float = 1.0,
    limit: int | None = None,
    batch_size: int = 64,
    data_changed_ok: bool = False,
    corpus=None,
) -> Evaluation:
    """sacreBLEU (13a; lowercase unless the model keeps case) of detokenised output on a
    held-out split, and the course's token BLEU. `corpus`, the run's `ParallelCorpus` if
    already built (it must hold the same data settings), saves building it again when
    several checkpoints of one run are scored.
    """
    if corpus is None:
        corpus = ParallelCorpus.from_settings(
            ckpt.payload["data"],
            data_path,
            changed_ok=data_changed_ok,
            vocabularies=(ckpt.src_vocab, ckpt.tgt_vocab),
        )
    elif (ours := split_settings(corpus.settings)) != (
        theirs := split_settings(ckpt.payload["data"])
    ):
        differ = sorted(
            k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k)
        )
        raise ValueError(
            "the corpus given was not built with the checkpoint's data settings"
            f" ({', '.join(differ)})"
        )
    corpus.use_vocabularies(ckpt.src_vocab, ckpt.tgt_vocab)
    pairs = getattr(corpus.splits, split)
    if limit is not None:  # the pairs of the first `limit` distinct sources
        first = set(list(dict.fromkeys(s for s, _ in pairs))[:limit])
        pairs = [(s, t) for s, t in pairs if s in first]
    if not pairs:
        raise ValueError(
            f"the {split} split of {corpus.path} is empty ({split}_frac="
            f"{corpus.settings[split + '_frac']}): there is nothing to evaluate"
        )
    cfg = ckpt.model.cfg
    max_len = min(MAX_OUTPUT, cfg.max_len - 1)
    # a source longer than the model's positions is cut to them
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = evaluate_bleu(
            ckpt.model,
            pairs,
            ckpt.src_vocab,
            ckpt.tgt_vocab,
            max_len=max_len,
            max_src_len=cfg.max_len - 1,
            batch_size=batch_size,
            search=search_for(beam, alpha),
            prepare=preparer(corpus.settings),
        )
    french, raw = corpus.settings["french_spacing"], keeps_case(corpus.settings)
    join = (lambda text: text) if raw else partial(detokenize, french=french)
    refs = [corpus.raw_refs[s] for s in result.sources]
    streams = [
        [r[k] if k < len(r) else None for r in refs] for k in range(max(map(len, refs)))
    ]
    unknown = count_unknowns(result.hypotheses)
    copied = unknown > 0 and writes_unknowns(ckpt.tgt_vocab)
    hyps = [join(h) for h in copy_unknowns(ckpt, result.sources, result.hypotheses)]
    return scored(
        hyps,
        streams,
        lowercase=not raw,
        before=[join(h) for h in result.hypotheses] if copied else None,
        split=split,
        references=sum(map(len, refs)),
        beam=beam,
        alpha=alpha,
        unknown=unknown,
        token_bleu=result.bleu,
    )


def evaluate_public(
    ckpt,
    *,
    test: str = "tatoeba",
    beam: int = 1,
    alpha: float = 1.0,
    limit: int | None = None,
    batch_size: int = 64,
    overlap_ok: bool = False,
) -> Evaluation:
    """sacreBLEU and chrF with sacreBLEU's defaults (case-sensitive, 13a, one reference
    per line) on the public Tatoeba test set, every line translated as `translate`
    would: scores others publish on it.
    """
    if ckpt.payload["data"].get("exclude") != test and not overlap_ok:
        raise ValueError(
            f"this model was trained without --exclude {test}, so it may have seen test"
            " sentences (the corpus is a Tatoeba export): retrain with it, or pass"
            " --overlap-ok to score anyway"
        )
    if not keeps_case(ckpt.payload["data"]):
        warnings.warn(
            "this model writes lowercase text with punctuation split off (--preprocess"
            " course); scored case-sensitively against references as written, it loses"
            " points for that alone"
        )
    pairs = read_tatoeba_test()[:limit]
    hyps = translate_lines(
        ckpt, [s for s, _ in pairs], beam=beam, alpha=alpha, batch_size=batch_size
    )
    refs = [t for _, t in pairs]
    return scored(
        hyps,
        [refs],
        lowercase=False,
        split="tatoeba-test-v2021-08-07",
        references=len(refs),
        beam=beam,
        alpha=alpha,
        unknown=count_unknowns(hyps),
        hypotheses=hyps,
        reference_lines=refs,
    )


def sacrebleu_counts(hypotheses, references) -> list[list[int]]:
    """Each sentence's BLEU counts (chapter 4a's) on sacreBLEU's 13a tokens: summed,
    sacreBLEU's score; drawn by `paired_bootstrap` for an interval."""
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    from nmt_lib.metrics import bleu_counts

    tokenize = Tokenizer13a()
    return [
        bleu_counts(tokenize(h).split(), [tokenize(r).split()])
        for h, r in zip(hypotheses, references)
    ]


def search_name(beam: int, alpha: float | None = None) -> str:
    """Greedy, or the beam with its length penalty unless 1."""
    return (
        "greedy"
        if beam == 1
        else f"beam {beam}"
        + (f", length penalty {alpha:g}" if alpha not in (None, 1.0) else "")
    )
