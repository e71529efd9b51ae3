"""Progress for the command line's trainer: a bar in a terminal or in Jupyter, plain lines in a
log file, or nothing. The lessons' loops use `tqdm.auto` alone."""
import os
import sys

from tqdm import tqdm
from tqdm.auto import tqdm as auto_tqdm

PROGRESS = ("auto", "bar", "lines", "none")
LOG_EVERY = 30.0  # seconds between two lines of progress in a log file


def in_notebook() -> bool:
    """True inside a Jupyter kernel (checked without importing IPython)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"


class LineWriter:
    """A file for tqdm that turns each redraw into one plain line: logs have no use for '\\r'."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str):
        text = text.replace("\r", "").rstrip()
        if text:
            self.stream.write(text + "\n")

    def flush(self):
        self.stream.flush()


def progress_bar(total: int, desc: str, mode: str = "auto", **kwargs) -> tqdm:
    """A tqdm bar: a widget in Jupyter, a line redrawn in place in a terminal, one plain line every
    `LOG_EVERY` seconds when standard error is a file ("lines"), or nothing ("none")."""
    if mode not in PROGRESS:
        raise ValueError(f"progress must be one of {PROGRESS}, got {mode!r}")
    if mode == "auto":
        mode = "auto" if in_notebook() or sys.stderr.isatty() else "lines"
    if mode == "lines":
        return tqdm(total=total, desc=desc, file=LineWriter(sys.stderr), mininterval=LOG_EVERY, ascii=True, **kwargs)
    if mode == "none" or os.environ.get("TQDM_DISABLE", "").lower() in ("1", "true", "yes"):
        kwargs["disable"] = True        # tqdm's own switch, which its notebook bar does not read
    return (auto_tqdm if mode == "auto" else tqdm)(total=total, desc=desc, file=sys.stderr, **kwargs)
