"""Any parallel corpus on disk as `NMTData`, with the raw references sacreBLEU scores
against, and the way back from the course's tokens to text."""

import re
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path


from nmt_lib.data import NMTData
from nmt_lib.base.course import check_choices, setting
from nmt_lib.base.download import file_sha1, fra_eng_path
from nmt_lib.run.testsets import TEST_SETS, overlap_filter, read_tatoeba_test
from nmt_lib.subword import SubwordVocab
from nmt_lib.text import Vocab, plain_spaces, preprocess, read_pairs, split_pairs


def unify_spaces(text: str) -> str:
    """Odd spaces made plain, runs of spaces made one: a reference as sacreBLEU should
    see it, and the raw text a case-keeping subword model reads."""
    return " ".join(plain_spaces(text).split())


PREPARE = {"course": preprocess, "raw": unify_spaces}  # raw text -> what is split


class SavedVocab(Vocab):
    """A word vocabulary rebuilt from the token list a checkpoint saved."""

    def __init__(self, idx_to_token):
        self.token_freqs = []
        self._set_tokens(list(idx_to_token))


def writes_unknowns(vocab: Vocab) -> bool:
    """Whether a word it never saw comes out as `<unk>`: words do; subwords fall back
    to pieces and bytes."""
    return not isinstance(vocab, SubwordVocab)


@dataclass(frozen=True)
class CorpusSettings:
    path: str | None = setting(
        None,
        "corpus file (source<TAB>target), or a folder with fra-eng/fra.txt "
        "(none: $NMT_DATA_DIR or ~/.cache/nmt_course, downloaded if missing)",
        flag="--data",
    )
    max_pairs: int | None = setting(None, "only the corpus's first N lines (none: all)")
    min_freq: int = setting(2, "keep tokens seen this often in the training split")
    valid_frac: float = setting(0.05, "share of source sentences held out to validate")
    test_frac: float = setting(0.05, "share of source sentences held out to test")
    seed: int = setting(0, "seed of the train/valid/test split", flag="--split-seed")
    tokenizer: str = setting(
        "word",
        "word: the words seen --min-freq times, the rest <unk>; bpe: subword pieces "
        "learned by SentencePiece on the training split (chapter 8b)",
        choices=("word", "bpe"),  # learn_vocabs builds each
    )
    vocab_size: int = setting(8000, "pieces in each subword vocabulary (bpe)")
    shared_vocab: bool = setting(
        False,
        "one vocabulary for both languages, learned from both sides of the "
        "training split (needed by --tie-embeddings)",
    )
    preprocess: str = setting(
        "course",
        "course: lowercase, punctuation split off (chapter 1); raw: the text as "
        "written, case and punctuation kept (with --tokenizer bpe)",
        choices=tuple(PREPARE),
    )
    exclude: str | None = setting(
        None,
        "tatoeba: leave out of training and validation every pair that shares "
        "its English or French sentence with the public Tatoeba test set, so that a "
        "model can be scored on it",
        choices=TEST_SETS,
    )

    def __post_init__(self):
        check_choices(self)
        if self.max_pairs is not None and self.max_pairs < 1:
            raise ValueError(f"max_pairs must be >= 1, got {self.max_pairs}")
        if self.preprocess == "raw" and self.tokenizer == "word":
            raise ValueError(
                "preprocess 'raw' keeps punctuation on the words: it needs subwords"
                " (--tokenizer bpe)"
            )
        if self.vocab_size < 1:
            raise ValueError(f"vocab_size must be >= 1, got {self.vocab_size}")
        if self.min_freq < 1:
            raise ValueError(f"min_freq must be >= 1, got {self.min_freq}")
        if not (
            0 <= self.valid_frac
            and 0 <= self.test_frac
            and self.valid_frac + self.test_frac < 1
        ):
            raise ValueError(
                "need 0 <= valid_frac, test_frac and valid_frac + test_frac < 1, "
                f"got {self.valid_frac} and {self.test_frac}"
            )


def preparer(data: dict):
    """How a checkpoint's model wants raw text (default: the course's)."""
    return PREPARE[data.get("preprocess", "course")]


def keeps_case(data: dict) -> bool:
    """Whether the model reads and writes text as written (`preprocess` raw)."""
    return data.get("preprocess", "course") == "raw"


def split_settings(data: dict) -> dict:
    """The data settings that define a run's split and vocabulary: all but where the
    file is and the counts a run reported (a resumed run adds some)."""
    return {k: v for k, v in data.items() if k not in ("path", "excluded")}


def resolve_corpus(path=None) -> Path:
    """A TSV file as given; a folder holding `fra-eng/fra.txt` or `fra.txt`; None: the
    course's default."""
    if path is None:
        return fra_eng_path()
    path = Path(path).expanduser()
    if path.is_dir():
        for candidate in (path / "fra-eng" / "fra.txt", path / "fra.txt"):
            if candidate.is_file():
                return candidate
        raise FileNotFoundError(
            f"{path} is a folder without fra-eng/fra.txt or fra.txt; give the corpus"
            " file itself"
        )
    if not path.is_file():
        raise FileNotFoundError(
            f"corpus {path} not found (expected a file of 'source<TAB>target' lines)"
        )
    return path


def learn_vocabs(train_pairs, given: CorpusSettings) -> tuple[Vocab, Vocab]:
    """(source, target) tokenizers learned from the training pairs alone, one object
    twice if shared."""
    if given.tokenizer == "word":
        learn = lambda sentences: Vocab(sentences, min_freq=given.min_freq)
    else:
        learn = lambda sentences: SubwordVocab.learn(sentences, given.vocab_size)
    if given.shared_vocab:
        both = learn([s for pair in train_pairs for s in pair])
        return both, both
    return learn([s for s, _ in train_pairs]), learn([t for _, t in train_pairs])


class ParallelCorpus(NMTData):
    """`NMTData` over any `source<TAB>target` file, with each source's raw references.
    `settings`: `CorpusSettings`' other fields; `vocabularies`, a checkpoint's (source,
    target) pair, saves learning them again (SentencePiece takes a minute)."""

    def __init__(self, path=None, *, vocabularies=None, **settings):
        given = CorpusSettings(path=None if path is None else str(path), **settings)
        self.path = resolve_corpus(given.path)
        raw = read_pairs(self.path, max_pairs=given.max_pairs)
        prepare = PREPARE[given.preprocess]
        clean = [(prepare(s), prepare(t)) for s, t in raw]
        self.raw_refs = {}
        for (src, _), (_, tgt) in zip(clean, raw):
            self.raw_refs.setdefault(src, []).append(unify_spaces(tgt))
        # the test set's sentences leave the split before the vocabulary is learned
        fracs = dict(valid_frac=given.valid_frac, test_frac=given.test_frac)
        splits = split_pairs(clean, **fracs, seed=given.seed)
        self.excluded = {}
        if given.exclude:
            test = read_tatoeba_test()
            overlaps = overlap_filter(test)
            # as the model reads them (the course's preprocessing lowercases)
            english, french = (
                {prepare(s) for s, _ in test},
                {prepare(t) for _, t in test},
            )
            banned = {
                c
                for c, (s, t) in zip(clean, raw)
                if overlaps(s, t) or c[0] in english or c[1] in french
            }
            kept = {
                split: [p for p in getattr(splits, split) if p not in banned]
                for split in ("train", "valid")
            }
            self.excluded = {
                split: len(getattr(splits, split)) - len(kept[split]) for split in kept
            }
            in_corpus = overlap_filter(raw)  # the other way round: test pairs seen
            self.excluded["test_pairs_in_corpus"] = sum(
                in_corpus(s, t) for s, t in test
            )
            as_written = {s for s, _ in raw}, {t for _, t in raw}
            self.excluded["test_pairs_in_corpus_exactly"] = sum(
                s in as_written[0] or t in as_written[1] for s, t in test
            )
            self.excluded["test_pairs"] = len(test)
            splits = splits._replace(**kept)
        if not splits.train:
            raise ValueError("the training split is empty; give more pairs")
        self.splits, self.seed = splits, given.seed
        self.src_vocab, self.tgt_vocab = vocabularies or learn_vocabs(
            splits.train, given
        )
        self.settings = {
            **asdict(given),
            "path": str(self.path.resolve()),
            "sha1": file_sha1(self.path),
            "french_spacing": french_spacing([t for _, t in raw[:5000]]),
        }
        if self.excluded:  # how much of the test set the corpus holds, for the record
            self.settings["excluded"] = dict(self.excluded)

    @classmethod
    def from_settings(
        cls, settings: dict, path=None, *, changed_ok: bool = False, vocabularies=None
    ) -> "ParallelCorpus":
        """The corpus a checkpoint was trained on (`path`: where it is now). A file
        whose SHA-1 differs is an error unless `changed_ok`: its held-out split could
        hold training sentences."""
        if path is None and not settings.get("path"):
            raise FileNotFoundError(
                "the checkpoint does not say which corpus the model was trained on;"
                " pass --data to name it"
            )
        if path is None and not Path(settings["path"]).exists():
            raise FileNotFoundError(
                f"the corpus the model was trained on, {settings['path']}, is not there"
                " any more; pass --data to say where it is now"
            )
        keys = [f.name for f in fields(CorpusSettings) if f.name != "path"]
        corpus = cls(
            path if path is not None else settings["path"],
            vocabularies=vocabularies,
            **{k: settings[k] for k in keys},
        )
        if corpus.settings["sha1"] != settings.get("sha1"):
            what = (
                f"{corpus.path} differs from the file the model was trained on (SHA-1"
                f" {corpus.settings['sha1'][:12]}, expected"
                f" {str(settings.get('sha1'))[:12]}), so its held-out split may hold"
                " training sentences"
            )
            if not changed_ok:
                raise ValueError(what + "; pass --data-changed-ok to go on anyway")
            sys.stderr.write(f"warning: {what}\n")
        return corpus

    def use_vocabularies(self, src_vocab: Vocab, tgt_vocab: Vocab) -> "ParallelCorpus":
        self.src_vocab, self.tgt_vocab = src_vocab, tgt_vocab
        return self

    def drop_longer_than(self, max_len: int) -> dict:
        """Drop from train and valid every pair that, with `<bos>`/`<eos>`, needs more
        than `max_len` positions (its batch would fail at every resume); returns the
        number dropped from each split."""
        fits = lambda s, t: (
            max(len(self.src_vocab.encode(s)), len(self.tgt_vocab.encode(t))) + 1
            <= max_len
        )
        kept = {
            split: [pair for pair in getattr(self.splits, split) if fits(*pair)]
            for split in ("train", "valid")
        }
        dropped = {
            split: len(getattr(self.splits, split)) - len(pairs)
            for split, pairs in kept.items()
        }
        if kept["train"] == [] and self.splits.train:
            raise ValueError(
                f"every training pair is longer than max_len={max_len} positions: raise"
                " --max-len"
            )
        self.splits = self.splits._replace(**kept)
        return dropped


def french_spacing(targets) -> bool:
    """Whether most targets put a space before ! and ? (French typography)."""
    spaced = sum(len(re.findall(r"\s[!?]", t)) for t in targets)
    tight = sum(len(re.findall(r"[^\s!?][!?]", t)) for t in targets)
    return spaced > tight


def detokenize(tokens, *, french: bool = True) -> str:
    """Join tokens into text: no space before , and . (nor before ! and ? unless
    `french`)."""
    text = tokens if isinstance(tokens, str) else " ".join(tokens)
    marks = ",." if french else ",.!?"
    return re.sub(rf" ([{re.escape(marks)}])", r"\1", text)
