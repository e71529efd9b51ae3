"""nmt_lib: the helper library of the attention and Transformer course (English -> French).

Every module except this file is generated from a notebook by tools/export_lib.py:
course <- 00_course, data <- 01_data, ... Import the module you need, e.g.
`from nmt_lib.data import NMTData`.
"""
__version__ = "0.1.0"
