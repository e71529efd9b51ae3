"""nmt_lib.base: what every chapter needs to run, hand-written, below the lessons. It
imports only the standard library, torch, pooch and itself: no lesson, no tooling.

- `course`: learner and quick mode, figures, headline numbers, settings fields.
- `device`: the device, the CPU threads and the training precision.
- `download`: the corpus on disk, and the one downloader (pooch, hash-checked).
- `cache`: the cache folder, atomic saves, the model cache (`cached_fit`).
"""
