"""nmt_lib: the helper library of the attention and Transformer course (English -> French).

Every module except this file and __main__.py is generated from the notebooks by
tools/export_lib.py; each names its notebooks in its first line. One concern per module:
course, download (chapter 0); text, data (1); plot (2); attention (3); metrics (4a); seq2seq,
loop, decoding, recipes (4b, 7); multihead (5); positional (6); transformer (7); evaluation (8);
training, checkpoint, corpus, cli (9); fast (10). Import what you need, e.g.
`from nmt_lib.data import NMTData`. The command-line tools: `python -m nmt_lib train|translate|evaluate --help`.
"""
__version__ = "0.1.0"
