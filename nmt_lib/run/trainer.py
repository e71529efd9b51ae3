"""The full-scale trainer of the command line: chapter 9's `fit`, with what a long run needs around it.

`RunHooks` fills in `fit`'s hooks (`nmt_lib.training.Hooks`): chapter 10's speed-ups (`FastDropout`, the sliced
loss, fused Adam), a moving average of the weights, a warm-down of the learning rate, lower precision under
`torch.autocast` (with loss scaling for fp16), data parallelism under torchrun, a checkpoint every
`checkpoint_every` updates and at each epoch's end, stopping cleanly on a `StopRequest` or a time limit, and
resuming a checkpoint bit for bit. `train_run` drives `fit` with them,
on a corpus that draws new subword pieces at each epoch where BPE-dropout is asked for.
"""
import math
import sys
import time
from dataclasses import dataclass

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from nmt_lib.fast import sliced_batch_loss, use_fast_dropout
from nmt_lib.loop import TrainingDiverged
from nmt_lib.run.progress import progress_bar
from nmt_lib.run.parallel import agree_to_stop, all_sum, data_parallel, gradient_sync, rank_and_world, seed_rank
from nmt_lib.recipes import paper_adam
from nmt_lib.run.average import keep_epoch
from nmt_lib.run.checkpoint import CheckpointError, first_line, save_checkpoint
from nmt_lib.base.course import setting
from nmt_lib.base.device import PRECISIONS, autocast_dtype
from nmt_lib.run.guards import StopRequest
from nmt_lib.run.records import close_session, new_session
from nmt_lib.model_helpers import eval_mode, model_device
from nmt_lib.data import TranslationDataset, collate
from nmt_lib.training import Hooks, TrainSettings, apply_update, batch_loss, fit, new_progress, noam_schedule


@dataclass
class RunSettings(TrainSettings):
    """Chapter 9's `TrainSettings`, and what the command line adds to them."""
    checkpoint_every: int = setting(500, "updates between checkpoints (0: only at epoch ends)")
    time_limit: float | None = setting(None, "minutes; stop, with a checkpoint, once exceeded")
    keep_last: int = setting(0, "also keep the checkpoints of the last N epoch ends, as OUT.epochE.pt, for "
                             "`average` (0: none)")
    loss: str = setting("plain", "plain: F.cross_entropy on the logits; sliced: chapter 10's output layer "
                        "and loss together, a slice of rows at a time", choices=("plain", "sliced"))
    fused_adam: bool = setting(False, "chapter 10's one-kernel Adam update")
    fast_dropout: bool = setting(False, "chapter 10's dropout: the same statistics from cheaper random numbers")
    ema: float = setting(0.0, "decay of an exponential moving average of the weights, updated after each update "
                         "and kept in the checkpoint; `average --ema` writes it out as a model (0: none)")
    bpe_dropout: float = setting(0.0, "BPE-dropout: segment the training split anew at each epoch, each merge "
                                 "skipped with this probability (SentencePiece's sampling; 0.1 in its paper; "
                                 "needs --tokenizer bpe; 0: the usual pieces)")
    warmdown: float = setting(0.0, "the last fraction of the run's budget (--time-limit, else --max-steps) over which "
                              "the learning rate falls linearly to zero, e.g. 0.2 (0: none)")
    precision: str = setting("fp32", "auto: bf16 where the CPU or GPU computes it natively, fp16 with loss "
                             "scaling on older GPUs, else fp32", choices=PRECISIONS)

    def __post_init__(self):
        super().__post_init__()
        if self.time_limit is not None and not (math.isfinite(self.time_limit) and self.time_limit > 0):
            raise ValueError(f"time_limit must be a positive number, got {self.time_limit}")
        if self.checkpoint_every < 0:
            raise ValueError(f"checkpoint_every must be >= 0, got {self.checkpoint_every}")
        if self.keep_last < 0:
            raise ValueError(f"keep_last must be >= 0, got {self.keep_last}")
        if not 0 <= self.bpe_dropout < 1:
            raise ValueError(f"bpe_dropout must be in [0, 1), e.g. 0.1, got {self.bpe_dropout}")
        if not 0 <= self.warmdown <= 1:
            raise ValueError(f"warmdown must be in [0, 1], e.g. 0.2, got {self.warmdown}")
        if self.warmdown and self.time_limit is None and self.max_steps is None:
            raise ValueError("warmdown needs a budget to end at: give --time-limit or --max-steps")
        if not 0 <= self.ema < 1:
            raise ValueError(f"ema must be in [0, 1), e.g. 0.999, got {self.ema}")
        if self.loss not in ("plain", "sliced"):
            raise ValueError(f"loss must be 'plain' or 'sliced', got {self.loss!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")


def restore(resume: dict, optimizer, schedule, scaler, ema, device) -> dict:
    """Go on from a checkpoint's payload: its optimizer, schedule, fp16 loss scale, moving average of the weights
    and random-number states (the CPU's, and the GPU's on CUDA, where dropout draws); returns its progress."""
    try:
        optimizer.load_state_dict(resume["optimizer"])
        if ema is not None:
            ema.load_state_dict(resume["ema"])
        schedule.load_state_dict(resume["schedule"])
        if scaler.is_enabled() and resume.get("scaler"):   # fp16: the loss scale and its growth tracker
            scaler.load_state_dict(resume["scaler"])
        progress = resume["progress"]
        if progress.get("rng") is not None:                 # a learner's own hook may not have saved it
            torch.set_rng_state(progress["rng"].cpu())      # the checkpoint may have been loaded onto a GPU
        if device.type == "cuda" and progress.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(progress["cuda_rng"].cpu(), device)
        return progress
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as e:
        raise CheckpointError(f"the checkpoint's training state is damaged ({first_line(e)})") from None


def sound(model, probe, settings, pad_id: int) -> bool:
    """Whether `model` can still translate: its weights are finite, and so is its loss on `probe` (a batch)
    in fp32. Weights that only overflow at the next forward pass would otherwise be saved as good."""
    if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
        return False
    with torch.no_grad(), eval_mode(model):           # no dropout: no random numbers drawn
        loss, _ = batch_loss(model, probe, settings, pad_id)
    return bool(torch.isfinite(loss))


class RunHooks(Hooks):
    """`fit`'s hooks for a run of the command line (see the module's docstring)."""

    def __init__(self, data, settings: RunSettings, *, resume=None, checkpoint=None, save_kwargs=None,
                 report="auto", stop: StopRequest | None = None):
        self.data, self.settings, self.resume, self.checkpoint = data, settings, resume, checkpoint
        self.save_kwargs, self.report, self.stop = save_kwargs or {}, report, stop
        self.rank, self.world = rank_and_world()                       # (0, 1): one process
        self.validate = self.rank == 0                                 # rank 0 alone computes the held-out loss
        self.saved_at = resume["progress"]["step"] if resume is not None else None  # what the file on disk holds
        self.stopped, self.start = None, time.perf_counter()

    def begin(self, model, settings):
        self.model, self.device = model, model_device(model)
        self.dtype = autocast_dtype(settings.precision, self.device)   # None: fp32; weights and Adam stay fp32
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.dtype == torch.float16)
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = paper_adam(params, lr=settings.lr_factor, fused=settings.fused_adam)
        self.schedule = noam_schedule(self.optimizer, d_model=model.cfg.d_model, warmup=settings.warmup)
        self.ema = None                 # the library's moving average: a copy of the model, lerped after each update
        if settings.ema:
            self.ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(settings.ema), use_buffers=True)
        self.progress = new_progress()
        if self.resume is not None:     # after building the schedule, which sets the rates that loading restores
            self.progress = restore(self.resume, self.optimizer, self.schedule, self.scaler, self.ema, self.device)
        if self.world > 1:
            seed_rank(settings.seed, self.progress["step"], self.rank)  # each rank its own dropout masks
        loss_fn = sliced_batch_loss if settings.loss == "sliced" else batch_loss
        pad_id = self.data.tgt_vocab.pad_id
        self.objective = data_parallel(model, lambda m, batch: loss_fn(m, batch, settings, pad_id))
        few = TranslationDataset((self.data.splits.valid or self.data.splits.train)[:8], self.data.src_vocab,
                                 self.data.tgt_vocab)          # encode the probe's pairs only, not a whole split
        vocab = self.data.tgt_vocab
        self.probe = collate([few[i] for i in range(len(few))], pad_id=vocab.pad_id, bos_id=vocab.bos_id,
                             eos_id=vocab.eos_id).to(self.device)
        self.spent_before = self.progress["seconds"]
        self.session = new_session(self.progress, self.device, self.world)
        return self.optimizer, self.schedule, self.progress

    def accumulate(self, model, micro_batches, settings, pad_id):
        """This rank's share of the micro-batches, under autocast. DDP averages the ranks' gradients, so each
        loss is scaled by the number of ranks to make it their sum; fp16's loss scale is taken off before `fit`
        divides and clips."""
        mine = micro_batches[self.rank::self.world]
        loss_sum, n_sum = 0.0, 0
        for i, batch in enumerate(mine or micro_batches[:1]):    # a rank without a share joins with a zero loss
            batch = batch.to(self.device)
            with gradient_sync(self.objective, last=i + 1 >= len(mine)):
                with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype is not None):
                    loss, n = self.objective(batch)
                if not mine:
                    loss, n = loss * 0, 0
                self.scaler.scale(loss * self.world).backward()
            loss_sum, n_sum = loss_sum + loss.item(), n_sum + n
        self.scaler.unscale_(self.optimizer)
        loss_sum, n_sum = all_sum(loss_sum, n_sum, device=self.device)
        return loss_sum, int(n_sum)

    def update(self, params, optimizer, schedule, tokens, clip):
        """fp16: the step goes through the loss scaler, which skips it when the scaled gradients overflowed (the
        scale then falls, and so does the schedule's step)."""
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
        if self.settings.warmdown:        # the next update's rate: the schedule's, times what the warm-down leaves
            left = self.warmdown_left(progress["step"])
            for group, rate in zip(optimizer.param_groups, schedule.get_last_lr()):
                group["lr"] = rate * left
        if self.ema is not None:
            self.ema.update_parameters(model)
        if self.settings.checkpoint_every and progress["step"] % self.settings.checkpoint_every == 0:
            self.save()
        return self.stop_reason() is not None

    def after_epoch(self, model, optimizer, schedule, progress) -> bool:
        self.save()
        if self.settings.keep_last and self.checkpoint is not None and self.rank == 0:
            keep_epoch(self.checkpoint, progress["epoch"] - 1, self.settings.keep_last)
        return self.stop_reason() is not None

    def warmdown_left(self, step: int) -> float:
        """1 until the last `warmdown` fraction of the budget, then falling linearly to 0 at its end. The budget
        is the time limit (counting the minutes of earlier sessions; each rank takes the ranks' mean, so all
        agree), else max_steps."""
        if self.settings.time_limit is not None:
            spent = self.spent_before + time.perf_counter() - self.start
            budget = self.spent_before + 60 * self.settings.time_limit
            done = all_sum(spent / budget, device=self.device)[0] / self.world
        else:
            done = step / self.settings.max_steps
        return min(1.0, max(0.0, (1 - done) / self.settings.warmdown))

    def bar(self, *, total, initial, desc, disable):
        mode = self.report if self.rank == 0 else "none"          # rank 0 alone reports
        return progress_bar(total, desc, mode, initial=initial, unit="batch")

    def say(self, line: str):
        if self.rank == 0 and self.report != "none":
            print(line, file=sys.stderr, flush=True)

    def stop_reason(self) -> str | None:
        """Why to stop now, the same on every rank: a stop request, max_steps or the time limit."""
        reason = None
        if self.stop is not None and self.stop.reason is not None:
            reason = self.stop.reason
        elif self.settings.max_steps is not None and self.progress["step"] >= self.settings.max_steps:
            reason = "max_steps"
        elif self.settings.time_limit is not None and (time.perf_counter() - self.start) / 60 > self.settings.time_limit:
            reason = "time_limit"
        self.stopped = agree_to_stop(reason, self.device)        # every rank stops at the same update
        return self.stopped

    def kept(self) -> str:
        if self.saved_at is not None:
            return f"the checkpoint {self.checkpoint} (update {self.saved_at:,}) is unaffected"
        return "no checkpoint was written" if self.checkpoint is not None else "nothing was saved"

    def save(self):
        """The checkpoint (rank 0 writes it), unless the weights can no longer translate."""
        progress = self.progress
        if not sound(self.model, self.probe, self.settings, self.data.tgt_vocab.pad_id):
            raise TrainingDiverged(f"the weights gave NaN or infinite values by update {progress['step']:,}, so they "
                                   "were not saved; lower lr_factor or raise warmup")
        progress["seconds"] = self.spent_before + time.perf_counter() - self.start
        close_session(progress, self.session, time.perf_counter() - self.start)
        progress.update(rng=torch.get_rng_state(),
                        cuda_rng=torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None)
        if self.checkpoint is not None and self.rank == 0:
            save_checkpoint(self.checkpoint, self.model, self.data.src_vocab, self.data.tgt_vocab,
                            train=self.settings, progress=progress, optimizer=self.optimizer,
                            schedule=self.schedule, scaler=self.scaler if self.scaler.is_enabled() else None,
                            ema=self.ema.state_dict() if self.ema is not None else None, **self.save_kwargs)
        if self.checkpoint is not None:                  # every rank knows what rank 0's checkpoint holds
            self.saved_at = progress["step"]


def train_run(model, data, settings: RunSettings, *, resume: dict | None = None, checkpoint=None,
              save_kwargs: dict | None = None, report: str = "auto", stop: StopRequest | None = None) -> dict:
    """Train `model` with chapter 9's `fit` and the command line's hooks: from `resume` (a checkpoint's payload)
    when given, writing `checkpoint` (a path) as it goes and when it stops. `settings.fast_dropout` swaps the
    model's dropout layers for `FastDropout` in place. Returns the progress; `progress["stopped"]` says why it
    stopped before its epochs ran out."""
    if settings.fast_dropout:
        use_fast_dropout(model)
    if settings.bpe_dropout:
        data = data.with_bpe_dropout(settings.bpe_dropout, model.cfg.max_len)
    hooks = RunHooks(data, settings, resume=resume, checkpoint=checkpoint, save_kwargs=save_kwargs, report=report,
                     stop=stop)
    try:
        if resume is not None and resume["progress"]["step"] >= (settings.max_steps or math.inf):
            hooks.begin(model, settings)           # nothing left to train: write the checkpoint as it stands
            progress, hooks.stopped = hooks.progress, "max_steps"
        else:
            progress = fit(model, data, settings, hooks=hooks)
        progress["stopped"] = hooks.stopped
        hooks.save()
    except TrainingDiverged as e:
        raise TrainingDiverged(f"{e}; {hooks.kept()}.") from None
    if hooks.stopped == "time_limit" and report != "none" and hooks.rank == 0:
        sys.stderr.write(f"time limit of {settings.time_limit} min reached at update {progress['step']:,}"
                         + ("; resume with --resume\n" if checkpoint is not None else "\n"))
    return progress


def held_out_line(progress: dict, has_valid: bool) -> str:
    """The last validation loss, and whether it is the final weights' or an earlier epoch end's."""
    history = progress["history"]
    done = [(e, s, v) for e, s, v in zip(history["epoch"], history["epoch_step"], history["valid_loss"])
            if v is not None]
    if not has_valid:
        return "no validation split"
    if not done:
        return "not validated: it stopped before an epoch's end"
    epoch, step, loss = done[-1]
    line = f"valid loss {loss:.3f} (perplexity {math.exp(loss):.2f})"
    if step != progress["step"]:
        line += f" at the end of epoch {epoch} (update {step:,}); the final weights were not validated"
    return line
