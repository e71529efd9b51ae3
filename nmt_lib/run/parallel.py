"""Data parallelism for the command line's trainer, tooling that chapter 10 explains:
across the processes that torchrun starts, each process (a *rank*) computes the gradient
of its share of an update's micro-batches, `DistributedDataParallel` sums the shares,
and every rank takes the same optimizer step, so the weights stay equal everywhere; the
ranks stop together and draw their own dropout masks. Without torchrun (one process)
every function here is a no-op."""

import hashlib
import os
from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from nmt_lib.base.device import DeviceError


def launched_by_torchrun() -> bool:
    """Whether this process is one of several that torchrun started
    (it sets WORLD_SIZE)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1) > 1


def rank_and_world() -> tuple[int, int]:
    """(this process's rank, the number of processes); (0, 1) outside a process
    group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def join_process_group(device: torch.device) -> torch.device:
    """Join the process group torchrun describes in the environment (RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT): NCCL between CUDA GPUs, Gloo between CPU processes.
    Returns this rank's device: GPU number LOCAL_RANK of its machine, or the CPU."""
    if device.type == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if local >= torch.cuda.device_count():
            raise DeviceError(
                "torchrun started more processes on this machine than its "
                f"{torch.cuda.device_count()} GPU(s): use --nproc_per_node "
                f"{torch.cuda.device_count()}"
            )
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        backend = "nccl"
    elif device.type == "cpu":
        backend = "gloo"
    else:
        raise DeviceError(
            f"training with torchrun runs on CUDA GPUs or on CPUs, not on {device}"
        )
    if not dist.is_initialized():
        dist.init_process_group(backend)
    return device


def leave_process_group():
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


class Objective(nn.Module):
    """`fn(model, *args)` as a module, so that DistributedDataParallel sees the whole
    loss computation (whichever of the model's methods it calls) as one forward pass."""

    def __init__(self, model: nn.Module, fn):
        super().__init__()
        self.model, self.fn = model, fn

    def forward(self, *args):
        return self.fn(self.model, *args)


def data_parallel(model: nn.Module, fn):
    """`fn(model, batch)` on one process; across ranks, the same wrapped in
    DistributedDataParallel, whose backward pass sums (averages) the gradient over the
    ranks."""
    rank, world = rank_and_world()
    objective = Objective(model, fn)
    if world == 1:
        return objective
    device = next(model.parameters()).device
    return DistributedDataParallel(
        objective,
        device_ids=[device] if device.type == "cuda" else None,
        # the buffers (positional encodings) never change
        broadcast_buffers=False,
    )


def gradient_sync(objective, last: bool):
    """Inside, a backward pass only accumulates locally, unless `last`: the share's last
    micro-batch, whose backward pass sums the accumulated gradients over the ranks."""
    if isinstance(objective, DistributedDataParallel) and not last:
        return objective.no_sync()
    return nullcontext()


def all_sum(*values: float, device=None) -> list:
    """Each value summed over the ranks (one all-reduce); the values themselves on one
    process."""
    rank, world = rank_and_world()
    if world == 1:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


STOP_CODES = ("max_steps", "time_limit")  # any other reason: a signal or a stop request


def agree_to_stop(reason: str | None, device=None) -> str | None:
    """The ranks stop together: if any rank has a reason to stop, all do (a rank that
    had none takes the first other rank's kind of reason)."""
    rank, world = rank_and_world()
    if world == 1:
        return reason
    code = (
        0
        if reason is None
        else (STOP_CODES.index(reason) + 1 if reason in STOP_CODES else 3)
    )
    t = torch.tensor([code], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    agreed = int(t.item())
    if agreed == 0 or reason is not None:
        return reason
    return (
        STOP_CODES[agreed - 1]
        if agreed <= len(STOP_CODES)
        else "stopped on another rank"
    )


def seed_rank(seed: int, step: int, rank: int):
    """Different dropout masks on each rank (the same masks everywhere would waste the
    extra data the ranks see): a seed drawn from the run's seed, the update reached and
    the rank."""
    digest = hashlib.sha256(f"{seed}/{step}/{rank}".encode()).digest()
    torch.manual_seed(int.from_bytes(digest[:8], "little") % 2**63)
