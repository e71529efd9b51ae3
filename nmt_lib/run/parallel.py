"""Data parallelism for the trainer (chapter 10 explains it): each process torchrun
starts (a *rank*) computes the gradient of its share of an update's micro-batches,
`DistributedDataParallel` sums them, and every rank takes the same step. Without
torchrun every function here is a no-op."""

import hashlib
import os
from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from nmt_lib.base.device import DeviceError


def launched_by_torchrun() -> bool:
    """Whether torchrun started this process among others (it sets WORLD_SIZE)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1) > 1


def rank_and_world() -> tuple[int, int]:
    """(this process's rank, the number of processes); (0, 1) without a group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def join_process_group(device: torch.device) -> torch.device:
    """Join torchrun's process group (NCCL between GPUs, Gloo between CPU processes);
    returns this rank's device: GPU number LOCAL_RANK of its machine, or the CPU."""
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
    """`fn(model, *args)` as a module: DistributedDataParallel sees the whole loss
    computation as one forward pass."""

    def __init__(self, model: nn.Module, fn):
        super().__init__()
        self.model, self.fn = model, fn

    def forward(self, *args):
        return self.fn(self.model, *args)


def data_parallel(model: nn.Module, fn):
    """`fn(model, batch)` as a module; across ranks, wrapped in DistributedDataParallel,
    whose backward pass averages the gradient over the ranks."""
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
    """Inside, a backward pass accumulates locally, unless `last` (the share's last
    micro-batch), whose backward pass sums the gradients over the ranks."""
    if isinstance(objective, DistributedDataParallel) and not last:
        return objective.no_sync()
    return nullcontext()


def all_sum(*values: float, device=None) -> list:
    """Each value summed over the ranks (one all-reduce)."""
    rank, world = rank_and_world()
    if world == 1:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


STOP_CODES = ("max_steps", "time_limit")  # any other reason: a signal or a stop request


def agree_to_stop(reason: str | None, device=None) -> str | None:
    """If any rank has a reason to stop, all stop (one without takes another's)."""
    rank, world = rank_and_world()
    if world == 1:
        return reason
    codes = {None: 0, **{r: code for code, r in enumerate(STOP_CODES, 1)}}
    t = torch.tensor([codes.get(reason, 3)], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    agreed = int(t.item())
    if agreed == 0 or reason is not None:
        return reason
    return STOP_CODES[agreed - 1] if agreed < 3 else "stopped on another rank"


def seed_rank(seed: int, step: int, rank: int):
    """Each rank its own dropout masks: a seed from the run's, the update and the
    rank."""
    digest = hashlib.sha256(f"{seed}/{step}/{rank}".encode()).digest()
    torch.manual_seed(int.from_bytes(digest[:8], "little") % 2**63)
