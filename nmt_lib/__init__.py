"""nmt_lib: the helper library of the attention and Transformer course (English -> French).

Every module except this file and __main__.py is generated from a notebook by
tools/export_lib.py: course <- 00_course, data <- 01_data, ..., training <- 09_training.
Import the module you need, e.g. `from nmt_lib.data import NMTData`. The command-line tools:
`python -m nmt_lib train|translate|evaluate --help`.
"""
__version__ = "0.1.0"
