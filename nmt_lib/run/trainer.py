"""The loop of `python -m nmt_lib train`: chapter 9's updates and held-out loss, with
chapter 10's speed-ups, autocast (fp16 with loss scaling), torchrun, checkpoints every
`checkpoint_every` updates and at epoch ends, a clean stop on a signal or time limit,
and bit-for-bit resuming in one process. The command around it is `train_command.py`.
"""

import math
import signal
import sys
import time

import torch
from torch import nn
from tqdm.auto import tqdm

from nmt_lib.base.device import autocast_dtype
from nmt_lib.fast import fused_paper_adam, sliced_batch_loss, use_fast_dropout
from nmt_lib.loop import TrainingDiverged, evaluate_loss
from nmt_lib.model_helpers import model_device
from nmt_lib.recipes import paper_adam
from nmt_lib.run.average import keep_epoch
from nmt_lib.run.checkpoint import CheckpointError, first_line, save_checkpoint
from nmt_lib.run.parallel import agree_to_stop, all_sum, data_parallel, gradient_sync
from nmt_lib.run.parallel import rank_and_world, seed_rank
from nmt_lib.run.settings import RunSettings
from nmt_lib.training import apply_update, batch_loss, epoch_line, noam_schedule
from nmt_lib.training import token_loaders, update_groups

LOG_EVERY = 30.0  # seconds between two lines of progress (--progress lines)


def say(text: str):
    """A progress line on stderr; under torchrun, from rank 0 only."""
    if rank_and_world()[0] == 0:
        sys.stderr.write(text)


class StopRequest:
    """A flag the trainer checks after every update: a signal handler or any other code
    sets it, and training stops after the update in progress, with a checkpoint."""

    def __init__(self):
        self.reason = None

    def __call__(self, signum=None, frame=None):
        name = signal.Signals(signum).name if signum is not None else "stop requested"
        self.reason = self.reason or name


def new_progress() -> dict:
    """Where a run stands, as its checkpoint records it: updates, epoch, micro-batch
    within it, seconds, random-number state, and the history of rates and losses."""
    keys = ("step", "lr", "train_loss", "tokens", "epoch", "epoch_step", "valid_loss")
    history = {key: [] for key in keys}
    return dict(step=0, epoch=1, batch=0, seconds=0.0, rng=None, history=history)


def restore(resume: dict, optimizer, schedule, scaler, device) -> dict:
    """Load a checkpoint payload's optimizer, schedule, fp16 loss scale and random
    states (CPU, and CUDA's where dropout draws); returns its progress."""
    try:
        optimizer.load_state_dict(resume["optimizer"])
        schedule.load_state_dict(resume["schedule"])
        if scaler.is_enabled() and resume.get("scaler"):  # fp16's loss scale
            scaler.load_state_dict(resume["scaler"])
        progress = resume["progress"]
        torch.set_rng_state(progress["rng"].cpu())  # it may have been loaded on a GPU
        if device.type == "cuda" and progress.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(progress["cuda_rng"].cpu(), device)
        return progress
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as e:
        raise CheckpointError(
            f"the checkpoint's training state is damaged ({first_line(e)})"
        ) from None


class Run:
    """A command-line run: model, corpus, optimizer, schedule, progress, and its loop
    (`train`). A subclass (speedrun/train.py's) may add settings (`settings_class`),
    view the corpus its own way (`training_data`), act after each update
    (`after_update`) and add to the checkpoint (`extras`)."""

    settings_class = RunSettings
    command = "python -m nmt_lib train"  # how a learner starts (and resumes) such a run

    def __init__(
        self,
        model,
        data,
        settings: RunSettings,
        *,
        resume=None,
        checkpoint=None,
        save_kwargs=None,
        report="auto",
        stop: StopRequest | None = None,
    ):
        self.model, self.data, self.settings = model, data, settings
        self.resume, self.checkpoint, self.save_kwargs = resume, checkpoint, save_kwargs
        self.stop = stop
        if report == "auto":  # a bar in a terminal, lines in a log file
            report = "bar" if sys.stderr.isatty() else "lines"
        self.report = report
        self.rank, self.world = rank_and_world()  # (0, 1): one process
        self.device = model_device(model)
        self.dtype = autocast_dtype(settings.precision, self.device)  # None: fp32
        self.scaler = torch.amp.GradScaler(
            self.device.type, enabled=self.dtype == torch.float16
        )  # weights and Adam stay fp32
        self.params = [p for p in model.parameters() if p.requires_grad]
        adam = fused_paper_adam if settings.fused_adam else paper_adam
        self.optimizer = adam(self.params, lr=settings.lr_factor)
        self.schedule = noam_schedule(
            self.optimizer, d_model=model.cfg.d_model, warmup=settings.warmup
        )
        self.progress = new_progress()
        if resume is not None:  # after the schedule, whose rates loading restores
            self.progress = restore(
                resume, self.optimizer, self.schedule, self.scaler, self.device
            )
        if self.world > 1:  # each rank its own dropout masks
            seed_rank(settings.seed, self.progress["step"], self.rank)
        loss_fn = sliced_batch_loss if settings.loss == "sliced" else batch_loss
        pad_id = data.tgt_vocab.pad_id
        self.objective = data_parallel(
            model, lambda m, batch: loss_fn(m, batch, settings, pad_id)
        )
        # what the file on disk holds
        self.saved_at = resume["progress"]["step"] if resume is not None else None
        self.spent_before, self.start = self.progress["seconds"], time.perf_counter()
        self.stopped, self.shown = None, self.start

    def train(self) -> dict:
        """Chapter 9's loop, from where the progress stands (maybe mid-epoch) until the
        epochs run out or `after_update` says stop."""
        settings, progress = self.settings, self.progress
        history = progress["history"]
        loader, valid = token_loaders(self.training_data(self.model), settings)
        dataset, collate = loader.dataset, loader.collate_fn
        self.model.train()
        for epoch in range(progress["epoch"], settings.epochs + 1):
            loader.batch_sampler.set_epoch(epoch)
            batches = list(loader.batch_sampler)
            tokens = [sum(len(dataset[i][1]) + 1 for i in b) for b in batches]
            start = progress["batch"]  # resumed within the epoch: the batches left
            updates = update_groups(tokens[start:], settings.tokens_per_update)
            updates = [(first + start, end + start) for first, end in updates]
            with self.bar(len(batches), progress["batch"], epoch) as bar:
                for first, end in updates:
                    micro = [
                        collate([dataset[i] for i in b]) for b in batches[first:end]
                    ]
                    loss, n = self.accumulate(micro)
                    if not math.isfinite(loss):
                        raise TrainingDiverged(
                            f"the loss became {loss} at update {progress['step'] + 1};"
                            " lower lr_factor or raise warmup"
                        )
                    lr = self.optimizer.param_groups[0]["lr"]  # this update's rate
                    self.update(n)
                    progress["step"], progress["batch"] = progress["step"] + 1, end
                    for key, value in zip(
                        ("step", "lr", "train_loss", "tokens"),
                        (progress["step"], lr, loss / n, n),
                    ):
                        history[key].append(value)
                    self.show(bar, end - first)
                    if self.after_update():
                        return progress
            self.end_epoch(valid)
            if self.stop_reason() is not None:
                break
        return progress

    def accumulate(self, micro_batches) -> tuple[float, int]:
        """Backpropagate this rank's share of the micro-batches under autocast; returns
        the loss and target tokens summed over ranks. Each loss is scaled by the ranks,
        since DDP averages gradients; fp16's scale is taken off before the update."""
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

    def update(self, tokens: int):
        """Chapter 9's `apply_update`; under fp16 through the loss scaler, which skips a
        step whose gradients overflowed (then the schedule does not step)."""
        params = self.params
        if not self.scaler.is_enabled():
            return apply_update(
                params, self.optimizer, self.schedule, tokens, self.settings.clip
            )
        for p in params:
            if p.grad is not None:
                p.grad.div_(tokens)
        if self.settings.clip is not None:
            nn.utils.clip_grad_norm_(params, self.settings.clip)
        scale = self.scaler.get_scale()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.scaler.get_scale() >= scale:
            self.schedule.step()
        self.optimizer.zero_grad(set_to_none=True)

    def after_update(self) -> bool:
        """A checkpoint every `checkpoint_every` updates; True stops the run."""
        every = self.settings.checkpoint_every
        if every and self.progress["step"] % every == 0:
            self.save()
        return self.stop_reason() is not None

    def end_epoch(self, valid):
        """Held-out loss (rank 0), the epoch's line, a checkpoint, the kept epochs."""
        progress, history = self.progress, self.progress["history"]
        validate = self.rank == 0 and bool(self.data.splits.valid)
        pad_id = self.data.tgt_vocab.pad_id
        valid_loss = evaluate_loss(self.model, valid, pad_id) if validate else None
        for key, value in zip(
            ("epoch", "epoch_step", "valid_loss"),
            (progress["epoch"], progress["step"], valid_loss),
        ):
            history[key].append(value)
        if self.report != "none":
            no_valid = f"epoch {progress['epoch']}: step {progress['step']:,}"
            say((epoch_line(progress) if validate else no_valid) + "\n")
        progress["epoch"], progress["batch"] = progress["epoch"] + 1, 0
        self.save()
        if self.settings.keep_last and self.checkpoint is not None and self.rank == 0:
            keep_epoch(self.checkpoint, progress["epoch"] - 1, self.settings.keep_last)

    def bar(self, total: int, initial: int, epoch: int):
        """An epoch's tqdm bar, on rank 0 with --progress bar."""
        off = self.rank != 0 or self.report in ("lines", "none")
        desc = f"epoch {epoch}/{self.settings.epochs}"
        return tqdm(total=total, initial=initial, desc=desc, unit="batch", disable=off)

    def show(self, bar, batches: int):
        """The update on the bar, or a line every `LOG_EVERY` s (--progress lines)."""
        p, history = self.progress, self.progress["history"]
        status = (
            f"step {p['step']:,}, loss {history['train_loss'][-1]:.3f},"
            f" lr {history['lr'][-1]:.2e}"
        )
        bar.update(batches)
        bar.set_postfix_str(status, refresh=False)
        now = time.perf_counter()
        if self.report == "lines" and now - self.shown >= LOG_EVERY:
            say(f"epoch {p['epoch']}/{self.settings.epochs}, {status}\n")
            self.shown = now

    def stop_reason(self) -> str | None:
        """Why to stop, agreed by all ranks: a request, max_steps, the time limit."""
        reason = None
        if self.stop is not None and self.stop.reason is not None:
            reason = self.stop.reason
        elif self.progress["step"] >= (self.settings.max_steps or math.inf):
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
        """The corpus as the loop reads it."""
        return self.data

    def extras(self) -> dict:
        """What a subclass adds to the checkpoint (plain data and tensors only)."""
        return {}

    def save(self):
        """The checkpoint (rank 0 writes it), unless the weights are not finite."""
        progress = self.progress
        if not all(bool(torch.isfinite(p).all()) for p in self.model.parameters()):
            raise TrainingDiverged(
                "the weights gave NaN or infinite values by update"
                f" {progress['step']:,}, so they were not saved; lower lr_factor or"
                " raise warmup"
            )
        progress["seconds"] = self.spent_before + time.perf_counter() - self.start
        progress["rng"] = torch.get_rng_state()
        cuda = self.device.type == "cuda"
        progress["cuda_rng"] = torch.cuda.get_rng_state(self.device) if cuda else None
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
                **(self.save_kwargs or {}),
                **self.extras(),
            )
        # every rank knows what rank 0's checkpoint holds
        if self.checkpoint is not None:
            self.saved_at = progress["step"]


def train_run(model, data, settings: RunSettings, *, run_class=Run, **options) -> dict:
    """Train `model` in a `run_class` run, `options` as `Run` takes them (`resume`, a
    checkpoint's payload; `checkpoint`, the path written). Returns the progress;
    `progress["stopped"]` says why it stopped before its epochs ran out."""
    if settings.fast_dropout:  # chapter 10's FastDropout, in place
        use_fast_dropout(model)
    run = run_class(model, data, settings, **options)
    try:
        if run.stop_reason() != "max_steps":  # else nothing is left to train
            run.train()
        run.progress["stopped"] = run.stopped
        run.save()
    except TrainingDiverged as e:
        raise TrainingDiverged(f"{e}; {run.kept()}.") from None
    model.eval()
    return run.progress
