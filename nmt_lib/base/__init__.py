"""nmt_lib.base: what every chapter needs to run, hand-written and below the lessons.

- `course`: learner and quick mode (`pick`), figures and headline numbers for `make
  course`, settings fields (`setting`).
- `device`: the device, the CPU threads and the training precision.
- `download`: finding the corpus on disk, and the course's one downloader (pooch,
  each file checked by its SHA-1 or SHA-256).
- `cache`: the course's cache folder, atomic saves, the model cache (`cached_fit`).

A base module imports only the standard library, torch, pooch (inside the downloader)
and other base modules: never a lesson (the generated modules one folder up) nor the
tooling (`nmt_lib.run`, `nmt_lib.checks`).
"""
