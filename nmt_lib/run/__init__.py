"""nmt_lib.run: the tooling, hand-written Python that no chapter teaches, above the
lessons (the modules one folder up, generated from the chapters) and the base below them
(`nmt_lib.base`).

- `corpus`: any tab-separated parallel corpus as chapter 1's `NMTData`, with raw
  references, and the tokenizer kinds (command-line names, checkpoint kinds).
- `checkpoint`: saving and safely loading a Transformer with everything needed to resume
  it.
- `settings`: what a run adds to chapter 9's settings, and the options built from them.
- `trainer`: `train`, chapter 9's `fit` for long runs: resuming, precision, chapter 10's
  speed-ups, torchrun, the run lock and signals (imported for `train` alone).
- `inference`: translating lines and scoring a held-out split with a checkpoint.
- `testsets`: the public Tatoeba test set, its download and its overlap with the corpus.
- `records`: the JSON records of runs that the README and the book are rendered from.
- `average`: checkpoint averaging, and the epoch ends `train --keep-last` keeps.
- `published`: the model the course ships (`load_published()`), and exporting one.
- `parallel`: data parallelism through torchrun for the trainer (chapter 10 explains
  it).
- `app`: chapter 8's translator app (`TranslatorApp`, `explore`, `draw_attention`) and
  the book's static views.
- `cli`: `python -m nmt_lib train|translate|evaluate|average`.
"""


def __getattr__(name):
    """`nmt_lib.run.load_published`, the course's published model, imported only when
    asked for (it needs safetensors and the Transformer)."""
    if name == "load_published":
        from nmt_lib.run.published import load_published

        return load_published
    raise AttributeError(f"module 'nmt_lib.run' has no attribute {name!r}")
