"""Where the course computes: the device (CUDA, then Apple's MPS, then the CPU), the CPU
threads, and the precision of the forward pass (fp32, or bf16/fp16 under
`torch.autocast`).

Tooling, not a lesson: the chapters call `default_device()`, `describe_device()` and
`use_threads()` in their first cell; the command line and the full-scale trainer also
parse `--device` and `--precision` here.
"""

import os
from pathlib import Path

import torch

DEVICE_ENV = "NMT_DEVICE"  # cpu | cuda | cuda:N | mps: overrides the automatic choice
THREADS_ENV = (  # a number of CPU threads; unset: PyTorch's default (all cores)
    "NMT_THREADS"
)


class DeviceError(ValueError):
    """A device or thread count that this machine cannot provide; the message is one
    line."""


def parse_device(name, *, source: str = "device") -> torch.device:
    """`torch.device(name)` after checking that this machine has it; `DeviceError`
    otherwise."""
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
    """Set PyTorch's CPU threads to `threads`, else to `NMT_THREADS` if set; return the
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
    """The most CPU threads the course lets PyTorch start: four per CPU (more only wait
    for each other)."""
    return 4 * (os.cpu_count() or 1)


def describe_device(device=None) -> str:
    """One line for a chapter's first cell: the device, and the CPU threads or the GPU's
    name."""
    device = torch.device(device) if device is not None else default_device()
    if device.type == "cuda":
        return f"device: {device} ({torch.cuda.get_device_name(device)})"
    if device.type == "mps":
        return "device: mps (Apple GPU)"
    return f"device: cpu ({torch.get_num_threads()} threads)"


PRECISIONS = ("auto", "fp32", "bf16", "fp16")


def cpu_info() -> tuple[str | None, set[str]]:
    """This CPU's model name and feature flags, read from Linux's /proc/cpuinfo; (None,
    empty) elsewhere."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None, set()
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in lines
            if line.startswith("model name")
        ),
        "CPU",
    )
    flags = set(
        next(
            (
                line.split(":", 1)[1].split()
                for line in lines
                if line.startswith("flags")
            ),
            [],
        )
    )
    return model, flags


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 products in hardware (x86 AVX-512 BF16 or AMX).
    Elsewhere PyTorch emulates them, far slower than fp32."""
    return bool(cpu_info()[1] & {"avx512_bf16", "amx_bf16"})


def autocast_dtype(precision: str, device) -> torch.dtype | None:
    """The dtype `torch.autocast` computes in for `precision` on `device`; None means
    fp32 (no autocast)."""
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
