"""Where the course computes: the device (CUDA, then Apple's MPS, then the CPU), the CPU
threads, and the forward pass's precision (fp32, or bf16/fp16 under `torch.autocast`).
The chapters' first cells call `default_device()`, `describe_device()`, `use_threads()`.
"""

import os
from pathlib import Path

import torch

DEVICE_ENV = "NMT_DEVICE"  # cpu | cuda | cuda:N | mps: overrides the automatic choice
THREADS_ENV = "NMT_THREADS"  # a number of CPU threads; unset: PyTorch's (all cores)


class DeviceError(ValueError):
    """A device or thread count that this machine cannot provide, in one line."""


def parse_device(name, *, source: str = "device") -> torch.device:
    """`torch.device(name)` if this machine has it, else `DeviceError`."""
    text = str(name).strip().lower()
    try:
        device = torch.device(text)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda", "mps"):
        raise DeviceError(
            f"{source} {name!r} is not a device the course knows: use cpu, cuda, cuda:N"
            " or mps"
        )
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                f"{source} {name!r}: this PyTorch sees no CUDA GPU on this machine"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise DeviceError(
                f"{source} {name!r}: this machine has {torch.cuda.device_count()} CUDA"
                " GPU(s), numbered from 0"
            )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise DeviceError(
            f"{source} {name!r}: Apple's MPS backend is not available on this machine"
        )
    return device


def default_device() -> torch.device:
    """`NMT_DEVICE` if set, else CUDA if available, else MPS, else the CPU."""
    name = os.environ.get(DEVICE_ENV, "").strip()
    if name:
        return parse_device(name, source=DEVICE_ENV)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def use_threads(threads: int | None = None) -> int:
    """Set PyTorch's CPU threads to `threads`, else `NMT_THREADS` if set; returns the
    number in use."""
    if threads is None and os.environ.get(THREADS_ENV, "").strip():
        text = os.environ[THREADS_ENV].strip()
        if not text.isdigit():
            raise DeviceError(
                f"{THREADS_ENV}={text!r} is not a positive whole number of threads"
            )
        threads = int(text)
    if threads is not None:
        if int(threads) < 1:
            raise DeviceError(
                f"the number of threads must be at least 1, not {threads}"
            )
        # OpenMP aborts the process when it cannot start them all
        if int(threads) > max_threads():
            raise DeviceError(
                f"{threads:,} threads are more than the course starts on this machine's"
                f" {os.cpu_count()} CPUs (four per CPU); use at most {max_threads()}"
            )
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()


def max_threads() -> int:
    """The most CPU threads the course starts: four per CPU (more only wait)."""
    return 4 * (os.cpu_count() or 1)


def describe_device(device=None) -> str:
    """A chapter's first line: the device, and the CPU threads or the GPU's name."""
    device = torch.device(device) if device is not None else default_device()
    if device.type == "cuda":
        return f"device: {device} ({torch.cuda.get_device_name(device)})"
    if device.type == "mps":
        return "device: mps (Apple GPU)"
    return f"device: cpu ({torch.get_num_threads()} threads)"


PRECISIONS = ("auto", "fp32", "bf16", "fp16")


def cpu_info() -> tuple[str | None, set[str]]:
    """This CPU's model name and feature flags from Linux's /proc/cpuinfo; (None, empty)
    elsewhere."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None, set()

    def first(key: str, default: str) -> str:
        found = (line.split(":", 1)[1] for line in lines if line.startswith(key))
        return next(found, default)

    return first("model name", "CPU").strip(), set(first("flags", "").split())


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (AVX-512 BF16 or AMX); elsewhere
    PyTorch emulates it, far slower than fp32."""
    return bool(cpu_info()[1] & {"avx512_bf16", "amx_bf16"})


def autocast_dtype(precision: str, device) -> torch.dtype | None:
    """The dtype `torch.autocast` uses for `precision` on `device`; None: fp32."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    device = torch.device(device)
    if precision == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return (
            torch.bfloat16 if device.type == "cpu" and cpu_has_native_bf16() else None
        )
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
