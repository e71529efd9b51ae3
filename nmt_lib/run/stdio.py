"""Standard input and output for the command line: input read in batches as lines arrive, output that
fails in one line (a full disk, a closed descriptor) rather than a traceback."""
import io
import sys

from nmt_lib.run.inference import input_batches


def stdin_batches(batch_size: int, warn):
    """Standard input's lines in batches as they arrive; a stand-in without a file descriptor (a notebook's,
    a test's `io.StringIO`) is read line by line."""
    try:
        sys.stdin.buffer.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        batch = []
        for line in sys.stdin:
            batch.append(line)
            if len(batch) == batch_size:
                yield batch
                batch = []
        if batch:
            yield batch
        return
    yield from input_batches(sys.stdin.buffer, batch_size, warn=warn)


class OutputError(ValueError):
    """Standard output cannot be written (a full disk, a closed descriptor)."""


def write_out(text: str):
    """Write to standard output and flush; `OutputError` in one line if that fails (a reader that went
    away is `BrokenPipeError`, which `main` answers quietly)."""
    if sys.stdout is None:
        return
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        raise OutputError(f"cannot write to standard output: {e.strerror or e}") from None
