"""nmt_lib.run: the tooling, hand-written, above the lessons and the base.

- `corpus`: any TSV parallel corpus as chapter 1's `NMTData`; the tokenizer kinds.
- `checkpoint`: saving and safely loading a Transformer with what resumes it.
- `settings`, `train_command`, `trainer`: `train`, chapter 9's loop for long runs.
- `inference`: translating lines and scoring a split; `testsets`: the Tatoeba test.
- `records`: the JSON records the README and the book are rendered from.
- `average`: checkpoint averaging; `published`: the model the course ships.
- `parallel`: torchrun's data parallelism; `app`: chapter 8's translator app.
- `diagram`: chapter 7's figure of the Transformer, drawn from a model.
- `cli`: `python -m nmt_lib train|translate|evaluate|average`.
"""


def __getattr__(name):
    """`nmt_lib.run.load_published`, imported only when asked for."""
    if name == "load_published":
        from nmt_lib.run.published import load_published

        return load_published
    raise AttributeError(f"module 'nmt_lib.run' has no attribute {name!r}")
