"""The course's tokenizers, chosen in one place: the names the command line takes, how each is learned
from a training split, and the classes a checkpoint rebuilds. Each has chapter 1's `Vocab` interface
(`split`, `encode`, `detokenize`, `to_tokens`, and `kind`, `state()`, `from_state` to be saved), so
adding a tokenizer means adding its class here."""
from functools import partial

from nmt_lib.subword import SubwordVocab
from nmt_lib.text import Vocab

TOKENIZERS = {"word": Vocab, "bpe": SubwordVocab}                     # the command line's names
BY_KIND = {cls.kind: cls for cls in TOKENIZERS.values()}              # the names checkpoints store


def learner(name: str, vocab_size: int):
    """What `NMTData(tokenizer=...)` takes for a command-line name: "word" (chapter 1's vocabulary,
    with `min_freq`), or a function that learns `vocab_size` subword pieces (chapter 8b)."""
    if name not in TOKENIZERS:
        raise ValueError(f"tokenizer must be one of {', '.join(TOKENIZERS)}, got {name!r}")
    return "word" if TOKENIZERS[name] is Vocab else partial(TOKENIZERS[name].learn, vocab_size=vocab_size)
