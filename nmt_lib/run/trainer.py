"""`python -m nmt_lib train`: chapter 9's `fit`, with what a long run needs around it.

`RunHooks` fills in `fit`'s hooks (`nmt_lib.training.Hooks`): chapter 10's speed-ups
(`FastDropout`, the sliced loss, fused Adam), lower precision under `torch.autocast`
(with loss scaling for fp16), data parallelism under torchrun, a checkpoint every
`checkpoint_every` updates and at each epoch's end, stopping cleanly on a signal or a
time limit, and resuming a checkpoint bit for bit. `train_run` drives `fit` with them;
`train_command` is the command: the settings, one run per checkpoint (a lock file), and
Ctrl-C, SIGTERM or SIGHUP ending with a checkpoint. The command line imports this module
for `train` alone.
"""

import fcntl
import math
import os
import signal
import sys
import time
from contextlib import contextmanager, nullcontext
from dataclasses import fields
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm
from tqdm.auto import tqdm as auto_tqdm

from nmt_lib.base.cache import temporary_files
from nmt_lib.base.device import autocast_dtype
from nmt_lib.data import TranslationDataset, collate
from nmt_lib.fast import sliced_batch_loss, use_fast_dropout
from nmt_lib.loop import TrainingDiverged
from nmt_lib.model_helpers import eval_mode, model_device, num_parameters
from nmt_lib.modern import ModernParts
from nmt_lib.recipes import paper_adam
from nmt_lib.run.average import keep_epoch, kept_epochs
from nmt_lib.run.checkpoint import (
    CheckpointError,
    first_line,
    load_checkpoint,
    save_checkpoint,
)
from nmt_lib.run.corpus import CorpusSettings, ParallelCorpus
from nmt_lib.run.parallel import (
    agree_to_stop,
    all_sum,
    data_parallel,
    gradient_sync,
    join_process_group,
    launched_by_torchrun,
    leave_process_group,
    rank_and_world,
    seed_rank,
)
from nmt_lib.run.settings import FAST, RunSettings, given, option
from nmt_lib.training import (
    Hooks,
    apply_update,
    batch_loss,
    fit,
    new_progress,
    noam_schedule,
)
from nmt_lib.transformer import Transformer, TransformerConfig

LOG_EVERY = 30.0  # seconds between two lines of progress in a log file
EXIT_STATUS = {"SIGHUP": 129, "SIGINT": 130, "SIGTERM": 143}  # 128 + the signal
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Ctrl-C, kill, ssh gone
RESUMABLE = (
    "epochs",
    "max_steps",
    "time_limit",
    "checkpoint_every",
    "keep_last",
    "precision",
)  # what a resumed run may change


def say(text: str):
    """A progress line on stderr; under torchrun, from rank 0 only."""
    if rank_and_world()[0] == 0:
        sys.stderr.write(text)


class LineWriter:
    """A file for tqdm that turns each redraw into one plain line: logs have no use for
    '\\r'."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str):
        if text := text.replace("\r", "").rstrip():
            self.stream.write(text + "\n")

    def flush(self):
        self.stream.flush()


def progress_bar(total: int, desc: str, mode: str = "auto", **kwargs) -> tqdm:
    """A tqdm bar: a widget in Jupyter, a line redrawn in place in a terminal, one
    plain line every `LOG_EVERY` seconds when standard error is a file ("lines"), or
    nothing ("none")."""
    if mode == "auto":
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
        in_notebook = type(shell).__name__ == "ZMQInteractiveShell"
        mode = "auto" if in_notebook or sys.stderr.isatty() else "lines"
    if mode == "lines":
        lines = LineWriter(sys.stderr)
        return tqdm(
            total=total,
            desc=desc,
            file=lines,
            mininterval=LOG_EVERY,
            ascii=True,
            **kwargs,
        )
    off = os.environ.get("TQDM_DISABLE", "").lower() in ("1", "true", "yes")
    if mode == "none" or off:
        kwargs["disable"] = True  # tqdm's own switch, which its notebook bar ignores
    bar = auto_tqdm if mode == "auto" else tqdm
    return bar(total=total, desc=desc, file=sys.stderr, **kwargs)


@contextmanager
def run_lock(path):
    """Hold an exclusive lock for the run that writes `path`: a lock file beside it,
    holding our pid. A second run on the same checkpoint stops with the first run's pid.
    The system releases the lock of a process that dies, so a killed run's lock is taken
    over, and the temporary files it left half-written for `path` are removed."""
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


class StopRequest:
    """A flag the trainer checks after every update: a signal handler or any other code
    sets it, and training stops after the update in progress, with a checkpoint."""

    def __init__(self):
        self.reason = None

    def __call__(self, signum=None, frame=None):
        name = signal.Signals(signum).name if signum is not None else "stop requested"
        self.reason = self.reason or name


@contextmanager
def stop_on_signals(stop: StopRequest, announce):
    """Inside the block, SIGINT, SIGTERM and SIGHUP set `stop` instead of killing the
    process; `announce(name)` runs at the first one. Later signals change nothing, so a
    second Ctrl-C cannot interrupt the checkpoint being written."""

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


def restore(resume: dict, optimizer, schedule, scaler, device) -> dict:
    """Go on from a checkpoint's payload: its optimizer, schedule, fp16 loss scale and
    random-number states (the CPU's, and the GPU's on CUDA, where dropout draws);
    returns its progress.
    """
    try:
        optimizer.load_state_dict(resume["optimizer"])
        schedule.load_state_dict(resume["schedule"])
        # fp16: the loss scale and its growth tracker
        if scaler.is_enabled() and resume.get("scaler"):
            scaler.load_state_dict(resume["scaler"])
        progress = resume["progress"]
        # a learner's own hook may not have saved it
        if progress.get("rng") is not None:
            # the checkpoint may have been loaded onto a GPU
            torch.set_rng_state(progress["rng"].cpu())
        if device.type == "cuda" and progress.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(progress["cuda_rng"].cpu(), device)
        return progress
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as e:
        raise CheckpointError(
            f"the checkpoint's training state is damaged ({first_line(e)})"
        ) from None


def sound(model, probe, settings, pad_id: int) -> bool:
    """Whether `model` can still translate: its weights are finite, and so is its loss
    on `probe` (a batch) in fp32. Weights that only overflow at the next forward pass
    would otherwise be saved as good.
    """
    if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
        return False
    with torch.no_grad(), eval_mode(model):  # no dropout: no random numbers drawn
        loss, _ = batch_loss(model, probe, settings, pad_id)
    return bool(torch.isfinite(loss))


class RunHooks(Hooks):
    """`fit`'s hooks for a run of the command line (see the module's docstring). A
    subclass may read settings of its own (`settings_class`, a subclass of
    `RunSettings`), train on its own view of the corpus (`training_data`) and add to the
    checkpoint (`extras`): the speedrun's does (speedrun/train.py)."""

    settings_class = RunSettings
    command = "python -m nmt_lib train"  # how a learner starts (and resumes) such a run

    def __init__(
        self,
        data,
        settings: RunSettings,
        *,
        resume=None,
        checkpoint=None,
        save_kwargs=None,
        report="auto",
        stop: StopRequest | None = None,
    ):
        self.data, self.settings, self.resume, self.checkpoint = (
            data,
            settings,
            resume,
            checkpoint,
        )
        self.save_kwargs, self.report, self.stop = save_kwargs or {}, report, stop
        self.rank, self.world = rank_and_world()  # (0, 1): one process
        self.validate = self.rank == 0  # rank 0 alone computes the held-out loss
        # what the file on disk holds
        self.saved_at = resume["progress"]["step"] if resume is not None else None
        self.stopped, self.start = None, time.perf_counter()

    def begin(self, model, settings):
        self.model, self.device = model, model_device(model)
        # None: fp32; weights and Adam stay fp32
        self.dtype = autocast_dtype(settings.precision, self.device)
        self.scaler = torch.amp.GradScaler(
            self.device.type, enabled=self.dtype == torch.float16
        )
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = paper_adam(
            params, lr=settings.lr_factor, fused=settings.fused_adam
        )
        self.schedule = noam_schedule(
            self.optimizer, d_model=model.cfg.d_model, warmup=settings.warmup
        )
        self.progress = new_progress()
        # after building the schedule, which sets the rates that loading restores
        if self.resume is not None:
            self.progress = restore(
                self.resume, self.optimizer, self.schedule, self.scaler, self.device
            )
        if self.world > 1:
            # each rank its own dropout masks
            seed_rank(settings.seed, self.progress["step"], self.rank)
        loss_fn = sliced_batch_loss if settings.loss == "sliced" else batch_loss
        pad_id = self.data.tgt_vocab.pad_id
        self.objective = data_parallel(
            model, lambda m, batch: loss_fn(m, batch, settings, pad_id)
        )
        few = TranslationDataset(
            (self.data.splits.valid or self.data.splits.train)[:8],
            self.data.src_vocab,
            self.data.tgt_vocab,
        )  # encode the probe's pairs only, not a whole split
        vocab = self.data.tgt_vocab
        self.probe = collate(
            [few[i] for i in range(len(few))],
            pad_id=vocab.pad_id,
            bos_id=vocab.bos_id,
            eos_id=vocab.eos_id,
        ).to(self.device)
        self.spent_before = self.progress["seconds"]
        return self.optimizer, self.schedule, self.progress

    def accumulate(self, model, micro_batches, settings, pad_id):
        """This rank's share of the micro-batches, under autocast. DDP averages the
        ranks' gradients, so each loss is scaled by the number of ranks to make it their
        sum; fp16's loss scale is taken off before `fit` divides and clips."""
        mine = micro_batches[self.rank :: self.world]
        loss_sum, n_sum = 0.0, 0
        # a rank without a share joins with a zero loss
        for i, batch in enumerate(mine or micro_batches[:1]):
            batch = batch.to(self.device)
            with gradient_sync(self.objective, last=i + 1 >= len(mine)):
                with torch.autocast(
                    self.device.type, dtype=self.dtype, enabled=self.dtype is not None
                ):
                    loss, n = self.objective(batch)
                if not mine:
                    loss, n = loss * 0, 0
                self.scaler.scale(loss * self.world).backward()
            loss_sum, n_sum = loss_sum + loss.item(), n_sum + n
        self.scaler.unscale_(self.optimizer)
        loss_sum, n_sum = all_sum(loss_sum, n_sum, device=self.device)
        return loss_sum, int(n_sum)

    def update(self, params, optimizer, schedule, tokens, clip):
        """fp16: the step goes through the loss scaler, which skips it when the scaled
        gradients overflowed (the scale then falls, and so does the schedule's step)."""
        if not self.scaler.is_enabled():
            return apply_update(params, optimizer, schedule, tokens, clip)
        for p in params:
            if p.grad is not None:
                p.grad.div_(tokens)
        if clip is not None:
            nn.utils.clip_grad_norm_(params, clip)
        scale = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        if self.scaler.get_scale() >= scale:
            schedule.step()
        optimizer.zero_grad(set_to_none=True)

    def after_update(self, model, optimizer, schedule, progress) -> bool:
        if (
            self.settings.checkpoint_every
            and progress["step"] % self.settings.checkpoint_every == 0
        ):
            self.save()
        return self.stop_reason() is not None

    def after_epoch(self, model, optimizer, schedule, progress) -> bool:
        self.save()
        if self.settings.keep_last and self.checkpoint is not None and self.rank == 0:
            keep_epoch(self.checkpoint, progress["epoch"] - 1, self.settings.keep_last)
        return self.stop_reason() is not None

    def bar(self, *, total, initial, desc, disable):
        mode = self.report if self.rank == 0 else "none"  # rank 0 alone reports
        return progress_bar(total, desc, mode, initial=initial, unit="batch")

    def say(self, line: str):
        if self.report != "none":
            say(line + "\n")

    def stop_reason(self) -> str | None:
        """Why to stop now, the same on every rank: a stop request, max_steps or the
        time limit."""
        reason = None
        if self.stop is not None and self.stop.reason is not None:
            reason = self.stop.reason
        elif (
            self.settings.max_steps is not None
            and self.progress["step"] >= self.settings.max_steps
        ):
            reason = "max_steps"
        elif (
            self.settings.time_limit is not None
            and (time.perf_counter() - self.start) / 60 > self.settings.time_limit
        ):
            reason = "time_limit"
        # every rank stops at the same update
        self.stopped = agree_to_stop(reason, self.device)
        return self.stopped

    def kept(self) -> str:
        if self.saved_at is not None:
            return (
                f"the checkpoint {self.checkpoint} (update {self.saved_at:,}) is"
                " unaffected"
            )
        return (
            "no checkpoint was written"
            if self.checkpoint is not None
            else "nothing was saved"
        )

    def training_data(self, model):
        """The corpus as `fit` reads it (a subclass may segment it anew each epoch)."""
        return self.data

    def extras(self) -> dict:
        """What a subclass adds to the checkpoint (plain data and tensors only)."""
        return {}

    def save(self):
        """The checkpoint (rank 0 writes it), unless the weights can no longer
        translate."""
        progress = self.progress
        if not sound(self.model, self.probe, self.settings, self.data.tgt_vocab.pad_id):
            raise TrainingDiverged(
                "the weights gave NaN or infinite values by update"
                f" {progress['step']:,}, so they were not saved; lower lr_factor or"
                " raise warmup"
            )
        progress["seconds"] = self.spent_before + time.perf_counter() - self.start
        progress.update(
            rng=torch.get_rng_state(),
            cuda_rng=(
                torch.cuda.get_rng_state(self.device)
                if self.device.type == "cuda"
                else None
            ),
        )
        if self.checkpoint is not None and self.rank == 0:
            save_checkpoint(
                self.checkpoint,
                self.model,
                self.data.src_vocab,
                self.data.tgt_vocab,
                train=self.settings,
                progress=progress,
                optimizer=self.optimizer,
                schedule=self.schedule,
                scaler=self.scaler if self.scaler.is_enabled() else None,
                **self.save_kwargs,
                **self.extras(),
            )
        # every rank knows what rank 0's checkpoint holds
        if self.checkpoint is not None:
            self.saved_at = progress["step"]


def train_run(
    model,
    data,
    settings: RunSettings,
    *,
    resume: dict | None = None,
    checkpoint=None,
    save_kwargs: dict | None = None,
    report: str = "auto",
    stop: StopRequest | None = None,
    hooks_class=RunHooks,
) -> dict:
    """Train `model` with chapter 9's `fit` and the command line's hooks (`hooks_class`,
    `RunHooks` or a subclass of it): from `resume`
    (a checkpoint's payload) when given, writing `checkpoint` (a path) as it goes and
    when it stops. `settings.fast_dropout` swaps the model's dropout layers for
    `FastDropout` in place. Returns the progress; `progress["stopped"]` says why it
    stopped before its epochs ran out."""
    if settings.fast_dropout:
        use_fast_dropout(model)
    hooks = hooks_class(
        data,
        settings,
        resume=resume,
        checkpoint=checkpoint,
        save_kwargs=save_kwargs,
        report=report,
        stop=stop,
    )
    try:
        if resume is not None and resume["progress"]["step"] >= (
            settings.max_steps or math.inf
        ):
            # nothing left to train: write the checkpoint as it stands
            hooks.begin(model, settings)
            progress, hooks.stopped = hooks.progress, "max_steps"
        else:
            progress = fit(model, hooks.training_data(model), settings, hooks=hooks)
        progress["stopped"] = hooks.stopped
        hooks.save()
    except TrainingDiverged as e:
        raise TrainingDiverged(f"{e}; {hooks.kept()}.") from None
    if hooks.stopped == "time_limit" and report != "none" and hooks.rank == 0:
        sys.stderr.write(
            f"time limit of {settings.time_limit} min reached at update"
            f" {progress['step']:,}"
            + ("; resume with --resume\n" if checkpoint is not None else "\n")
        )
    return progress


def held_out_line(progress: dict, has_valid: bool) -> str:
    """The last validation loss, and whether it is the final weights' or an earlier
    epoch end's."""
    history = progress["history"]
    done = [
        (e, s, v)
        for e, s, v in zip(
            history["epoch"], history["epoch_step"], history["valid_loss"]
        )
        if v is not None
    ]
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


# ---- the command: `python -m nmt_lib train`
# ----------------------------------------------


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


def new_run(
    settings: RunSettings,
    model_options: dict,
    corpus_options: dict,
    parts: ModernParts,
    device,
):
    """The corpus and a fresh model for a run that starts now."""
    say("reading the corpus ...\n")
    corpus = ParallelCorpus(**corpus_options)
    cfg = TransformerConfig(
        len(corpus.src_vocab), len(corpus.tgt_vocab), **model_options
    )
    torch.manual_seed(settings.seed)
    model = Transformer(cfg, parts)  # initialised on the CPU: the same on any device
    return settings, corpus, model.to(device)


def resume_differences(
    args, resume: dict, saved_train: dict, settings_class=RunSettings
) -> list[str]:
    """The options given for a resumed run whose values differ from the run's own (only
    RESUMABLE may)."""
    differ = []
    for cls, stored in (
        (TransformerConfig, resume["config"]),
        (ModernParts, resume.get("parts") or {}),
        (settings_class, saved_train),
        (CorpusSettings, resume["data"]),
    ):
        for f in fields(cls):
            value = given(args, cls).get(f.name, stored.get(f.name))
            if f.name not in RESUMABLE + ("path",) and value != stored.get(f.name):
                differ.append(
                    f"{option(f)[0][0]} {value} (the run has {stored.get(f.name)})"
                )
    return differ


def train_command(args, parser, hooks_class=RunHooks) -> int:
    settings_class = hooks_class.settings_class
    # bad settings: nothing read, written or locked
    fresh = None if args.resume else new_settings(args, parser, settings_class)
    out = Path(args.out).expanduser().resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    if launched_by_torchrun():  # one of several data-parallel processes
        args.device = join_process_group(args.device)
    try:
        with run_lock(out) if rank_and_world()[0] == 0 else nullcontext():  # rank 0
            return train_locked(args, out, fresh, hooks_class)
    finally:
        leave_process_group()


def resumed_run(args, out: Path, settings_class=RunSettings):
    """The settings, corpus, model and checkpoint payload of the run saved in `out`,
    with the options a resumed run may change."""
    ckpt = load_checkpoint(out, device=args.device)
    resume = ckpt.payload
    if not all(resume.get(k) for k in ("progress", "optimizer", "schedule", "train")):
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
    if differ := resume_differences(args, resume, saved, settings_class):
        raise ValueError(
            "--resume goes on with the run as it started, but these options "
            "differ from it: "
            + "; ".join(differ)
            + ". Leave them out, or start a new run with another --out"
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


def train_locked(args, out: Path, fresh: tuple | None, hooks_class=RunHooks) -> int:
    resume = None
    if args.resume:
        settings, corpus, model, resume = resumed_run(
            args, out, hooks_class.settings_class
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
            hooks_class=hooks_class,
        )
    if progress["stopped"] not in (None, "max_steps", "time_limit"):  # a signal
        say(
            f"stopped by {progress['stopped']} at update {progress['step']:,}; the "
            f"checkpoint {out} holds everything so far. Go on with: "
            f"{hooks_class.command} --out {out} --resume\n"
        )
        return EXIT_STATUS.get(progress["stopped"], EXIT_STATUS["SIGTERM"])
    if rank == 0:  # rank 0 alone validated and reports
        print(
            f"trained {progress['step']:,} updates in {progress['seconds'] / 60:.1f} "
            f"min; {held_out_line(progress, bool(corpus.splits.valid))}; "
            f"checkpoint {out}",
            flush=True,
        )
    return 0
