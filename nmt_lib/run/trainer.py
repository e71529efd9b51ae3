"""The full-scale trainer of the command line: chapter 9's training lesson, plus what a long run needs.

Chapter 9 teaches `fit` in one process and in fp32. `full_fit` takes the same steps (`batch_loss`,
`update_groups`, `apply_update`, `close_epoch` are the lesson's) and adds chapter 10's speed-ups
(`FastDropout`, the sliced loss, fused Adam), lower precision under `torch.autocast` (with loss scaling
for fp16), data parallelism under torchrun, checkpoints every `checkpoint_every` updates, stopping
cleanly on a `StopRequest` or a time limit, and resuming a checkpoint bit for bit. With none of those
switched on, it computes exactly what `fit` computes (a test checks it).
"""
import math
import sys
import time
from dataclasses import dataclass

import torch

from nmt_lib.fast import sliced_batch_loss, use_fast_dropout
from nmt_lib.loop import TrainingDiverged
from nmt_lib.run.progress import progress_bar
from nmt_lib.run.parallel import agree_to_stop, all_sum, data_parallel, gradient_sync, rank_and_world, seed_rank, share
from nmt_lib.recipes import paper_adam
from nmt_lib.run.average import keep_epoch
from nmt_lib.run.checkpoint import CheckpointError, first_line, save_checkpoint
from nmt_lib.base.course import setting
from nmt_lib.base.device import PRECISIONS, autocast_dtype
from nmt_lib.run.guards import StopRequest
from nmt_lib.run.records import close_session, new_session
from nmt_lib.model_helpers import eval_mode, model_device
from nmt_lib.training import (TrainSettings, apply_update, batch_loss, close_epoch, epoch_batches, new_progress,
                              noam_schedule, record_update, token_loaders, update_groups)


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
        if self.loss not in ("plain", "sliced"):
            raise ValueError(f"loss must be 'plain' or 'sliced', got {self.loss!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")


def restore(resume: dict, optimizer, schedule, scaler) -> dict:
    """Go on from a checkpoint's payload: its optimizer, schedule and fp16 loss scale; returns its progress."""
    try:
        optimizer.load_state_dict(resume["optimizer"])
        schedule.load_state_dict(resume["schedule"])
        if scaler.is_enabled() and resume.get("scaler"):   # fp16: the loss scale and its growth tracker
            scaler.load_state_dict(resume["scaler"])
        return resume["progress"]
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as e:
        raise CheckpointError(f"the checkpoint's training state is damaged ({first_line(e)})") from None


def restore_rng(progress: dict, device):
    """The random-number states a run saved: the CPU's, and the GPU's on CUDA (dropout draws there)."""
    try:
        if progress.get("rng") is not None:
            torch.set_rng_state(progress["rng"].cpu())     # the checkpoint may have been loaded onto a GPU
        if device.type == "cuda" and progress.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(progress["cuda_rng"].cpu(), device)
    except (RuntimeError, ValueError) as e:
        raise CheckpointError(f"the checkpoint's random-number state is damaged ({first_line(e)})") from None


def rng_states(device) -> dict:
    return {"rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}


def sound(model, probe, settings, pad_id: int) -> bool:
    """Whether `model` can still translate: its weights are finite, and so is its loss on `probe` (a batch)
    in fp32. Weights that only overflow at the next forward pass would otherwise be saved as good."""
    if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
        return False
    with torch.no_grad(), eval_mode(model):           # no dropout: no random numbers drawn
        loss, _ = batch_loss(model, probe, settings, pad_id)
    return bool(torch.isfinite(loss))


def full_fit(model, data, settings: RunSettings, *, optimizer=None, resume: dict | None = None, checkpoint=None,
             save_kwargs: dict | None = None, report: str = "auto", stop: StopRequest | None = None) -> dict:
    """Train `model` on `data`'s train split, as chapter 9's `fit` does, with the switches of `settings`.

    `resume` is a checkpoint's payload: training goes on from its progress, optimizer and schedule.
    Writes `checkpoint` (a path) every `checkpoint_every` updates, at each epoch end and when it stops
    (`stop`, a `StopRequest`, asks it to stop early). Under torchrun each rank takes its share of every
    update; rank 0 alone reports, validates and writes the checkpoint. `settings.fast_dropout` swaps
    the model's dropout layers for `FastDropout` in place.
    Returns the progress; `progress["stopped"]` says why it stopped before its epochs ran out.
    """
    device, pad_id = model_device(model), data.tgt_vocab.pad_id
    rank, world = rank_and_world()                           # (0, 1): one process
    report = report if rank == 0 else "none"
    if settings.fast_dropout:
        use_fast_dropout(model)
    dtype = autocast_dtype(settings.precision, device)       # None: fp32; weights and Adam stay fp32 anyway
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)   # fp16 needs loss scaling
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = optimizer or paper_adam(params, lr=settings.lr_factor, fused=settings.fused_adam)
    schedule = noam_schedule(optimizer, d_model=model.cfg.d_model, warmup=settings.warmup)
    progress = new_progress()
    if resume is not None:          # after building the schedule, which sets the rates that loading restores
        progress = restore(resume, optimizer, schedule, scaler)
    restore_rng(progress, device)
    saved_at = progress["step"] if resume is not None else None      # the update the checkpoint on disk holds
    if world > 1:
        seed_rank(settings.seed, progress["step"], rank)     # each rank its own dropout masks
    loss_fn = sliced_batch_loss if settings.loss == "sliced" else batch_loss
    objective = data_parallel(model, lambda m, batch: loss_fn(m, batch, settings, pad_id))
    loader, valid = token_loaders(data, settings)
    dataset, collate = loader.dataset, loader.collate_fn
    held = valid if len(valid.dataset) else loader
    probe = held.collate_fn([held.dataset[i] for i in range(min(8, len(held.dataset)))]).to(device)
    start, tokens_seen, spent_before = time.perf_counter(), 0, progress["seconds"]
    session = new_session(progress, device, world)

    def kept() -> str:
        return (f"the checkpoint {checkpoint} (update {saved_at:,}) is unaffected" if saved_at is not None else
                "no checkpoint was written" if checkpoint is not None else "nothing was saved")

    def save():
        nonlocal saved_at
        if not sound(model, probe, settings, pad_id):   # never write weights that cannot translate
            raise TrainingDiverged(f"the weights gave NaN or infinite values by update {progress['step']:,}; lower "
                                   f"lr_factor or raise warmup. Nothing was saved: {kept()}.")
        progress["seconds"] = spent_before + time.perf_counter() - start
        close_session(progress, session, time.perf_counter() - start)
        progress.update(rng_states(device))
        if checkpoint is not None and rank == 0:
            save_checkpoint(checkpoint, model, data.src_vocab, data.tgt_vocab, train=settings, progress=progress,
                            optimizer=optimizer, schedule=schedule, scaler=scaler if scaler.is_enabled() else None,
                            **(save_kwargs or {}))
        if checkpoint is not None:                   # every rank knows what rank 0's checkpoint holds
            saved_at = progress["step"]

    def stop_reason():
        reason = None
        if stop is not None and stop.reason is not None:
            reason = stop.reason
        elif settings.max_steps is not None and progress["step"] >= settings.max_steps:
            reason = "max_steps"
        elif settings.time_limit is not None and (time.perf_counter() - start) / 60 > settings.time_limit:
            reason = "time_limit"
        return agree_to_stop(reason, device)                 # every rank stops at the same update

    def scaled_step():              # fp16: skipped when the scaled gradients overflowed
        scale = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        return scaler.get_scale() >= scale

    model.train()
    stopping = stop_reason()
    while progress["epoch"] <= settings.epochs and stopping is None:
        batches, tokens = epoch_batches(loader, progress["epoch"])
        optimizer.zero_grad(set_to_none=True)
        with progress_bar(len(batches), f"epoch {progress['epoch']}/{settings.epochs}", report,
                          initial=progress["batch"], unit="batch") as bar:
            for first, end in update_groups(tokens, settings.tokens_per_update, start=progress["batch"]):
                acc_loss, acc_tokens = 0.0, 0
                mine = share(first, end, rank, world)         # on one process: range(first, end)
                for index in mine or [first]:                 # a rank without a share joins with a zero loss
                    with gradient_sync(objective, last=index + world >= end):
                        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                            loss, n = objective(collate([dataset[i] for i in batches[index]]).to(device))
                        if not torch.isfinite(loss):
                            raise TrainingDiverged(f"the loss became {loss.item()} at update {progress['step'] + 1}; "
                                                   f"lower lr_factor or raise warmup; {kept()}.")
                        if not mine:
                            loss, n = loss * 0, 0
                        scaler.scale(loss).backward()
                    acc_loss, acc_tokens = acc_loss + loss.item(), acc_tokens + n
                bar.update(end - first)
                acc_loss, acc_tokens = all_sum(acc_loss, acc_tokens, device=device)   # over the ranks
                scaler.unscale_(optimizer)
                lr = optimizer.param_groups[0]["lr"]
                # The ranks' gradient sums, averaged by DDP: divided by the tokens of one rank's share.
                apply_update(params, optimizer, schedule, acc_tokens / world, settings.clip,
                             step=scaled_step if scaler.is_enabled() else None)
                record_update(progress, lr, acc_loss, acc_tokens)
                progress["batch"] = end
                tokens_seen += acc_tokens
                bar.set_postfix_str(f"step {progress['step']:,}, loss {acc_loss / acc_tokens:.3f}, lr {lr:.2e}, "
                                    f"{tokens_seen / (time.perf_counter() - start):,.0f} tok/s", refresh=False)
                if settings.checkpoint_every and progress["step"] % settings.checkpoint_every == 0:
                    save()
                stopping = stop_reason()
                if stopping is not None:
                    break
            else:                                     # the epoch ran to its end
                held_out = close_epoch(progress, model, valid, pad_id, validate=bool(data.splits.valid) and rank == 0)
                bar.set_postfix_str(f"{held_out}, {tokens_seen / (time.perf_counter() - start):,.0f} tok/s",
                                    refresh=False)
                save()
                if settings.keep_last and checkpoint is not None and rank == 0:
                    keep_epoch(checkpoint, progress["epoch"] - 1, settings.keep_last)
                stopping = stop_reason()
    if stopping == "time_limit" and report != "none":
        sys.stderr.write(f"time limit of {settings.time_limit} min reached at update {progress['step']:,}"
                         + ("; resume with --resume\n" if checkpoint is not None else "\n"))
    progress["stopped"] = stopping
    save()
    model.eval()
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
