"""nmt_lib.run: the tooling, hand-written Python that no chapter teaches, above the lessons (the
modules one folder up, generated from the chapters) and the base below them (`nmt_lib.base`).

- `tokenizers`: the tokenizer kinds, chosen in one place (command-line names, checkpoint kinds).
- `corpus`: any tab-separated parallel corpus as chapter 1's `NMTData`, with raw references.
- `checkpoint`: saving and safely loading a Transformer with everything needed to resume it.
- `sizes`: a Transformer's parameters and memory from its config, and the tools' ceiling.
- `guards`: the run lock, Ctrl-C, SIGTERM and SIGHUP, the writable-output check, beam memory budgets.
- `trainer`: chapter 9's `fit` for long runs: resuming, precision, chapter 10's speed-ups, torchrun.
- `inference`: translating lines as they arrive and scoring a held-out split with a checkpoint.
- `options`: command-line options built from the settings dataclasses.
- `stdio`: standard input in batches as it arrives, standard output that fails in one line.
- `testsets`: the public Tatoeba test set, its download and its overlap with the corpus.
- `records`: the JSON records of runs that the README and the book are rendered from.
- `average`: checkpoint averaging, and the epoch ends `train --keep-last` keeps.
- `published`: the model the course ships (`load_published()`), and exporting one.
- `parallel`: data parallelism through torchrun for the trainer (chapter 10 explains it).
- `app`: chapter 8's translator app (`TranslatorApp`, `explore`, `draw_attention`) and the book's static views.
- `cli`: `python -m nmt_lib train|translate|evaluate|average`.
"""


def __getattr__(name):
    """`nmt_lib.run.load_published`, the course's published model, imported only when asked for (it
    needs safetensors and the Transformer)."""
    if name == "load_published":
        from nmt_lib.run.published import load_published
        return load_published
    raise AttributeError(f"module 'nmt_lib.run' has no attribute {name!r}")
