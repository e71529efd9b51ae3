"""What keeps a long run from losing work or memory: the checkpoint's folder is checked before anything
is read, one run per checkpoint holds a lock, Ctrl-C, SIGTERM or SIGHUP stops training cleanly with a checkpoint,
and beam search decodes only as many sentences at once as a memory budget allows."""
import fcntl
import os
import signal
import tempfile
from contextlib import contextmanager
from pathlib import Path

from nmt_lib.base.cache import temporary_files
from nmt_lib.run.checkpoint import CheckpointError

EXIT_STATUS = {"SIGHUP": 129, "SIGINT": 130, "SIGTERM": 143}    # 128 + the signal's number, as shells report a killed program


def check_writable(path, what: str = "checkpoint", option: str = "--out") -> Path:
    """The file `path` names (the checkpoint, or what `what` says), with symbolic links resolved (the lock and
    the write then go to the file itself). Fails now, not at the first write, if it cannot be written: the
    folder is made if it is missing, and a probe file is created and removed in it."""
    example = "model.pt" if what == "checkpoint" else "file.json"
    if str(path).endswith(("/", os.sep)):
        raise CheckpointError(f"{option} {path} ends with a slash, which names a folder; give a file name, "
                              f"e.g. {Path(path) / example}")
    path = Path(path).expanduser().resolve()
    if path.is_dir():
        raise CheckpointError(f"the {what} {path} is a folder; give a file name, e.g. {path / example}")
    if path.exists() and not path.is_file():
        raise CheckpointError(f"the {what} {path} exists and is not a regular file (a device or a pipe); "
                              "give a file name")
    blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise CheckpointError(f"cannot write the {what} {path}: {blocker} is a file, not a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as e:
        raise CheckpointError(f"cannot write the {what} {path}: {e.strerror or e}") from None
    return path


@contextmanager
def run_lock(path):
    """Hold an exclusive lock for the run that writes `path`: a lock file beside it, holding our pid.

    A second run on the same checkpoint stops with the first run's pid. The operating system releases
    the lock of a process that dies, so a lock left by a killed run is simply taken over, and the
    temporary files such a run left half-written for `path` (and for no other file) are removed."""
    path = Path(path)
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise CheckpointError(f"{path} is being trained by another run (pid {holder}); wait for it to "
                                  f"finish, or choose another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        for left in temporary_files(path):      # half-written by a run on this very file that was killed
            left.unlink(missing_ok=True)
        yield
    finally:
        os.close(fd)                             # closing the file releases the lock


class StopRequest:
    """A flag the trainer checks after every update: a signal handler (`signal.signal(SIGINT, stop)`) or
    any other code sets it, and training stops after the update in progress, with a checkpoint."""

    def __init__(self):
        self.reason = None

    def __call__(self, signum=None, frame=None):
        self.reason = self.reason or (signal.Signals(signum).name if signum is not None else "stop requested")


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)   # Ctrl-C, kill, a closed terminal or ssh


@contextmanager
def stop_on_signals(stop: StopRequest, announce):
    """Inside the block, SIGINT, SIGTERM and SIGHUP set `stop` (training finishes its update, saves and
    returns) instead of killing the process; `announce(name)` runs at the first one. Later signals change
    nothing, so a second Ctrl-C cannot interrupt the checkpoint being written."""
    def handler(signum, frame):
        if stop.reason is None:
            announce(signal.Signals(signum).name)
        stop(signum, frame)

    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield stop
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


def beam_batch_size(beam: int, model, *, max_len: int, budget_mb: float, wanted: int) -> int:
    """How many sentences beam search may decode together within `budget_mb` megabytes.

    Each of the batch x beam rows holds a few vocabulary-sized score vectors and a key-value cache that
    grows to `max_len` positions in every decoder layer (float32). Too large a beam for one sentence is
    an error that says what would fit."""
    cfg, layers = model.cfg, len(model.decoder.blocks)
    row = 4 * (8 * cfg.tgt_vocab_size + 4 * layers * max_len * cfg.d_model)       # bytes per row
    fits = int(budget_mb * 2 ** 20 // (beam * row))
    if fits < 1:
        raise ValueError(f"beam {beam:,} needs about {beam * row / 2 ** 20:,.0f} MB for one sentence with this "
                         f"model, more than the memory budget of {budget_mb:,.0f} MB; raise --memory-budget or "
                         f"use at most --beam {int(budget_mb * 2 ** 20 // row):,}")
    return min(wanted, fits)
