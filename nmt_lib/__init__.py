"""nmt_lib: the helper library of the attention and Transformer course (English ->
French).

Three layers, bottom to top; a module imports only its own layer and those below it. The
base, hand-written: `nmt_lib.base` (learner and quick mode, device, corpus download,
model cache): what a chapter needs to run. The lessons: every module in this folder
except this file and __main__.py is generated from the chapters by tools/export_lib.py,
and names its notebooks in its first line: text, data (1); plot (2); attention (3);
metrics (4a); model_helpers, seq2seq, loop, decoding, recipes (4b, 7); multihead (5);
positional (6); transformer (7); evaluation (8); subword, unknowns (8b); training (9);
fast (10); lm, lm_train, ptb (11); modern (12). The tooling, hand-written: `nmt_lib.run`
(command line, checkpoints, locks and signals, the trainer, the published model, the
translator app; its __init__ lists its modules) and `nmt_lib.checks` (the graders of the
exercises' implement tasks, grouped by chapters: sequences 1-4b, transformer 5-7, later
8-11, modern 12).

Import what you need, e.g. `from nmt_lib.data import NMTData`. The command-line tools:
`python -m nmt_lib train|translate|evaluate --help`.
"""

__version__ = "0.1.0"
