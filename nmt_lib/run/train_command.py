"""`python -m nmt_lib train`: the settings of a new or resumed run, one run per
checkpoint (a lock file), and Ctrl-C, SIGTERM or SIGHUP ending with a checkpoint. The
loop itself is `trainer.Run`.
"""

import fcntl
import math
import os
import signal
from contextlib import contextmanager, nullcontext
from dataclasses import fields
from pathlib import Path

import torch

from nmt_lib.base.cache import temporary_files
from nmt_lib.base.device import autocast_dtype
from nmt_lib.model_helpers import num_parameters
from nmt_lib.modern import ModernParts, ModernTransformer
from nmt_lib.run.average import kept_epochs
from nmt_lib.run.checkpoint import CheckpointError, load_checkpoint
from nmt_lib.run.corpus import CorpusSettings, ParallelCorpus
from nmt_lib.run.parallel import join_process_group, launched_by_torchrun
from nmt_lib.run.parallel import leave_process_group, rank_and_world
from nmt_lib.run.records import validations
from nmt_lib.run.settings import FAST, RunSettings, given, option
from nmt_lib.run.trainer import Run, StopRequest, say, train_run
from nmt_lib.transformer import TransformerConfig

EXIT_STATUS = {"SIGHUP": 129, "SIGINT": 130, "SIGTERM": 143}  # 128 + the signal
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl-C, kill, ssh gone
# what a resumed run may change, and where the corpus is now
RESUMABLE = ("epochs", "max_steps", "time_limit", "checkpoint_every", "keep_last")
RESUMABLE += ("precision", "path")


@contextmanager
def run_lock(path):
    """An exclusive lock on a file beside `path` that holds our pid: a second run on the
    checkpoint stops, naming it. A dead process's lock is released by the system, and
    the temporary files it left for `path` are removed."""
    path = Path(path)
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise CheckpointError(
                f"{path} is being trained by another run (pid {holder}); wait for it "
                "to finish, or choose another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        for left in temporary_files(path):  # half-written by a killed run on this file
            left.unlink(missing_ok=True)
        yield
    finally:
        os.close(fd)  # closing the file releases the lock


@contextmanager
def stop_on_signals(stop: StopRequest, announce):
    """Inside, SIGINT, SIGTERM and SIGHUP set `stop` (`announce(name)` at the first);
    a second Ctrl-C cannot interrupt the checkpoint being written."""

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


def held_out_line(progress: dict, has_valid: bool) -> str:
    """The last validation loss, and whether it is the final weights'."""
    done = validations(progress["history"])
    if not has_valid:
        return "no validation split"
    if not done:
        return "not validated: it stopped before an epoch's end"
    epoch, step, loss = done[-1]
    line = f"valid loss {loss:.3f} (perplexity {math.exp(loss):.2f})"
    if step != progress["step"]:
        line += (
            f" at the end of epoch {epoch} (update {step:,}); the final weights were"
            " not validated"
        )
    return line


def new_settings(
    args, parser, settings_class=RunSettings
) -> tuple[RunSettings, dict, dict, ModernParts]:
    """The settings of a run that starts now, checked before anything is read, written
    or locked."""
    try:
        settings = settings_class(**given(args, settings_class, FAST))
        model_options = given(args, TransformerConfig, FAST)
        parts = ModernParts(**given(args, ModernParts))
        TransformerConfig(1, 1, **model_options)  # checked before the corpus is read
        corpus_options = given(args, CorpusSettings)
        CorpusSettings(**corpus_options)
        if model_options.get("tie_embeddings") and not corpus_options.get(
            "shared_vocab"
        ):
            raise ValueError(
                "--tie-embeddings needs --shared-vocab: one matrix can only "
                "serve one vocabulary"
            )
    except (TypeError, ValueError) as e:
        parser.error(str(e))
    return settings, model_options, corpus_options, parts


def new_run(settings, model_options: dict, corpus_options: dict, parts, device):
    """The corpus and a fresh model for a run that starts now."""
    say("reading the corpus ...\n")
    corpus = ParallelCorpus(**corpus_options)
    cfg = TransformerConfig(
        len(corpus.src_vocab), len(corpus.tgt_vocab), **model_options
    )
    torch.manual_seed(settings.seed)
    # initialised on the CPU: the same on any device
    model = ModernTransformer(cfg, parts)
    return settings, corpus, model.to(device)


def train_command(args, parser, run_class=Run) -> int:
    settings_class = run_class.settings_class
    # bad settings: nothing read, written or locked
    fresh = None if args.resume else new_settings(args, parser, settings_class)
    out = Path(args.out).expanduser().resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    if launched_by_torchrun():  # one of several data-parallel processes
        args.device = join_process_group(args.device)
    try:
        with run_lock(out) if rank_and_world()[0] == 0 else nullcontext():  # rank 0
            return train_locked(args, out, fresh, run_class)
    finally:
        leave_process_group()


def resumed_run(args, out: Path, settings_class=RunSettings):
    """The settings (with the changes allowed), corpus, model and payload of the run
    saved in `out`."""
    ckpt = load_checkpoint(out, device=args.device)
    resume = ckpt.payload
    keys = ("progress", "optimizer", "schedule", "train")
    if not all(resume.get(k) for k in keys) or "rng" not in resume["progress"]:
        raise CheckpointError(
            f"{out} holds no training state to resume from"
            + (
                ": it holds averaged weights (average); resume the run's own --out"
                if resume.get("averaged")
                else ""
            )
        )
    saved = resume["train"]
    if unknown := set(saved) - {f.name for f in fields(settings_class)}:
        raise ValueError(
            f"{out} was trained with {', '.join(sorted(unknown))}, which this command"
            " does not have: resume it with the command that trained it"
        )
    stored = (
        (TransformerConfig, resume["config"]),
        (ModernParts, resume.get("parts") or {}),
        (settings_class, saved),
        (CorpusSettings, resume["data"]),
    )
    differ = [
        f"{option(f)[0][0]} {value} (the run has {kept.get(f.name)})"
        for cls, kept in stored
        for f in fields(cls)
        if f.name not in RESUMABLE
        and (value := given(args, cls).get(f.name, kept.get(f.name)))
        != kept.get(f.name)
    ]
    if differ:
        raise ValueError(
            "--resume goes on with the run as it started, but these options differ"
            f" from it: {'; '.join(differ)}. Leave them out, or start a new run with"
            " another --out"
        )
    changes = {k: v for k, v in given(args, settings_class).items() if k in RESUMABLE}
    settings = settings_class(**{**saved, "time_limit": None, **changes})
    corpus = ParallelCorpus.from_settings(
        resume["data"],
        getattr(args, "data", None),
        changed_ok=args.data_changed_ok,
        vocabularies=(ckpt.src_vocab, ckpt.tgt_vocab),
    )
    say(
        f"resuming {out} at update {resume['progress']['step']:,} "
        f"(epoch {resume['progress']['epoch']})\n"
    )
    return settings, corpus, ckpt.model, resume


def train_locked(args, out: Path, fresh: tuple | None, run_class=Run) -> int:
    resume = None
    if args.resume:
        settings, corpus, model, resume = resumed_run(
            args, out, run_class.settings_class
        )
    else:
        if out.exists() or kept_epochs(out):
            raise FileExistsError(
                f"{out if out.exists() else min(kept_epochs(out).values())} exists; "
                "pass --resume to continue its run, or choose another --out"
            )
        settings, corpus, model = new_run(*fresh, args.device)
    if corpus.excluded:
        say(
            f"left out {corpus.excluded['train']:,} training and "
            f"{corpus.excluded['valid']:,} validation pairs that share a sentence with "
            f"the {corpus.settings['exclude']} test set (--exclude)\n"
        )
    dropped = corpus.drop_longer_than(model.cfg.max_len)
    if any(dropped.values()):
        say(
            f"left out {dropped['train']:,} training and {dropped['valid']:,}"
            f" validation pairs longer than the model's {model.cfg.max_len} positions"
            " (--max-len)\n"
        )
    dtype = autocast_dtype(settings.precision, args.device)
    rank, world = rank_and_world()
    ranks = f" in each of {world} processes (torchrun)" if world > 1 else ""
    fp = "fp32" if dtype is None else str(dtype).replace("torch.", "")
    say(
        f"{corpus}\nTransformer: {num_parameters(model):,} parameters on {args.device}"
        f"{ranks}, computing in {fp}; checkpoint {out}\n"
    )
    announce = lambda name: say(
        f"\n{name}: stopping after the update in progress, then writing {out}\n"
    )
    with stop_on_signals(StopRequest(), announce) as stop:
        progress = train_run(
            model,
            corpus,
            settings,
            resume=resume,
            checkpoint=out,
            save_kwargs={"data": corpus.settings},
            report=args.progress,
            stop=stop,
            run_class=run_class,
        )
    if progress["stopped"] not in (None, "max_steps", "time_limit"):  # a signal
        say(
            f"stopped by {progress['stopped']} at update {progress['step']:,}; the "
            f"checkpoint {out} holds everything so far. Go on with: "
            f"{run_class.command} --out {out} --resume\n"
        )
        return EXIT_STATUS.get(progress["stopped"], EXIT_STATUS["SIGTERM"])
    if progress["stopped"] == "time_limit":
        say(
            f"time limit of {settings.time_limit} min reached at update"
            f" {progress['step']:,}; go on with: {run_class.command} --out {out}"
            " --resume (and --time-limit for another limit)\n"
        )
    if rank == 0:  # rank 0 alone validated and reports
        print(
            f"trained {progress['step']:,} updates in {progress['seconds'] / 60:.1f} "
            f"min; {held_out_line(progress, bool(corpus.splits.valid))}; "
            f"checkpoint {out}",
            flush=True,
        )
    return 0
