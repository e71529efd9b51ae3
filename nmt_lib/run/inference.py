"""A trained checkpoint at work: translating lines of text and scoring a held-out split with sacreBLEU.
The command line's `translate` and `evaluate` call these two functions."""
from functools import partial

from nmt_lib.run.corpus import ParallelCorpus, detokenize
from nmt_lib.decoding import beam_search, evaluate_bleu, greedy_decode, translate
from nmt_lib.run.guards import beam_batch_size
from nmt_lib.text import preprocess
from nmt_lib.unknowns import UNK, replace_unknowns

MEMORY_BUDGET = 2048                                                    # MB for beam search's scores and caches

# The command line decodes the whole corpus, whose sentences run longer than the chapters' short ones:
# it lets a translation run to 80 tokens where the chapters stop at decoding's MAX_LEN (50).
MAX_OUTPUT = 80


def search_for(beam: int):
    """Greedy decoding for beam 1, else beam search with `beam` hypotheses."""
    return greedy_decode if beam == 1 else partial(beam_search, beam_size=beam)


def translate_lines(ckpt, lines, *, beam: int = 1, batch_size: int = 64, max_len: int = MAX_OUTPUT,
                    tokenized: bool = False, memory_budget: float = MEMORY_BUDGET) -> list[str]:
    """Raw sentences -> translations, one per input line (empty lines stay empty). Beam search decodes
    as many lines together as `memory_budget` (MB) allows."""
    french = ckpt.payload["data"].get("french_spacing", True)
    if beam > 1:
        batch_size = beam_batch_size(beam, ckpt.model.cfg, max_len=max_len, budget_mb=memory_budget, wanted=batch_size)
    lines = [line.rstrip("\r\n") for line in lines]
    keep = [i for i, line in enumerate(lines) if line.strip()]
    out = translate(ckpt.model, [lines[i] for i in keep], ckpt.src_vocab, ckpt.tgt_vocab, max_len=max_len,
                    batch_size=batch_size, search=search_for(beam))
    if not tokenized:
        out = copy_unknowns(ckpt, [preprocess(lines[i]) for i in keep], out)
    result = [""] * len(lines)
    for i, text in zip(keep, out):
        result[i] = text if tokenized else detokenize(text, french=french)
    return result


def count_unknowns(hypotheses) -> int:
    """`<unk>` in translations (SentencePiece writes an unknown piece as ⁇ unless told otherwise)."""
    return sum(h.count(UNK) + h.count("\u2047") for h in hypotheses)


def copy_unknowns(ckpt, sources, hypotheses) -> list[str]:
    """Word-level output with each `<unk>` replaced by the source word it attends to most (chapter 8b);
    subword output, which has no `<unk>` to replace, as it is."""
    if not ckpt.tgt_vocab.writes_unknowns or not count_unknowns(hypotheses):
        return list(hypotheses)
    replaced = replace_unknowns(ckpt.model, [ckpt.src_vocab.split(s) for s in sources],
                                [h.split() for h in hypotheses], ckpt.src_vocab, ckpt.tgt_vocab)
    return [" ".join(tokens) for tokens in replaced]


def evaluate_checkpoint(ckpt, *, data_path=None, split: str = "test", beam: int = 1, limit: int | None = None,
                        batch_size: int = 64, data_changed_ok: bool = False,
                        memory_budget: float = MEMORY_BUDGET) -> dict:
    """sacreBLEU (13a, lowercase) of detokenised output on a held-out split, and the course's token BLEU."""
    import sacrebleu                                   # the standard BLEU; installed with the course

    corpus = ParallelCorpus.from_settings(ckpt.payload["data"], data_path, changed_ok=data_changed_ok)
    corpus.use_vocabularies(ckpt.src_vocab, ckpt.tgt_vocab)
    pairs = getattr(corpus.splits, split)
    if not pairs:
        raise ValueError(f"the {split} split of {corpus.path} is empty ({split}_frac="
                         f"{corpus.settings[split + '_frac']}): there is nothing to evaluate")
    if beam > 1:
        batch_size = beam_batch_size(beam, ckpt.model.cfg, max_len=MAX_OUTPUT, budget_mb=memory_budget, wanted=batch_size)
    result = evaluate_bleu(ckpt.model, pairs, ckpt.src_vocab, ckpt.tgt_vocab, limit=limit,
                           max_len=MAX_OUTPUT, batch_size=batch_size, search=search_for(beam))
    french = corpus.settings["french_spacing"]
    refs = [corpus.raw_refs[s] for s in result.sources]
    streams = [[r[k] if k < len(r) else None for r in refs] for k in range(max(map(len, refs)))]
    metric = sacrebleu.BLEU(lowercase=True)
    unknown = count_unknowns(result.hypotheses)
    copied = unknown > 0 and ckpt.tgt_vocab.writes_unknowns
    hyps = [detokenize(h, french=french) for h in copy_unknowns(ckpt, result.sources, result.hypotheses)]
    score = metric.corpus_score(hyps, streams)
    with_unknowns = (metric.corpus_score([detokenize(h, french=french) for h in result.hypotheses], streams).score
                     if copied else score.score)                 # nothing was replaced: the same text
    chrf = sacrebleu.CHRF(lowercase=True)
    return {"sacrebleu": score.score, "signature": str(metric.get_signature()), "token_bleu": result.bleu,
            "chrf": chrf.corpus_score(hyps, streams).score, "chrf_signature": str(chrf.get_signature()),
            "sentences": len(hyps), "references": sum(map(len, refs)), "split": split, "beam": beam,
            "score_line": str(score), "examples": list(zip(result.sources[:5], hyps[:5])),
            "unknown": unknown, "copied": copied,
            "sacrebleu_with_unknowns": with_unknowns}
