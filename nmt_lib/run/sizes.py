"""What a Transformer costs before it exists: its parameters counted on a model built on the meta device, the
memory they take, and the ceilings the tools hold to (parameters, and layers). A size typed by mistake (`--d-model 1000000`) or
read from a crafted checkpoint (`n_layers = 10**7`) is refused in one line, before any memory is taken.
"""
import os

import torch

from nmt_lib.model_helpers import num_parameters
from nmt_lib.transformer import Transformer, TransformerConfig

MAX_PARAMETERS = 1_000_000_000        # the tools' ceiling: 4 GB of fp32 weights, about 16 GB to train
MAX_LAYERS = 1_000                    # each block costs Python objects (about 200 KB) whatever its width
MAX_POSITIONS = 65_536                # far beyond any sentence of the course
BYTES_TO_TRAIN = 16                   # per parameter: fp32 weights, gradients and Adam's two moments
BYTES_TO_RUN = 4                      # per parameter: fp32 weights


def transformer_parameters(config: dict, parts=None) -> int:
    """The number of parameters of `Transformer(TransformerConfig(**config), parts)`, counted on a model built
    on the meta device, which allocates nothing."""
    with torch.device("meta"):
        return num_parameters(Transformer(TransformerConfig(**config), parts))


def machine_memory() -> int | None:
    """This machine's memory in bytes (None where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def gigabytes(n: float) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e8 else f"{n / 1e6:,.0f} MB"


def check_model_size(config: dict, *, parts=None, training: bool, what: str = "the model", hint: str = "") -> int:
    """The parameter count of the Transformer `config` (a dict of `TransformerConfig` fields) and `parts` describe;
    `ValueError` naming the estimated memory when it passes `MAX_PARAMETERS` or this machine's memory,
    or when it has more than `MAX_LAYERS` layers."""
    if config["max_len"] > MAX_POSITIONS:
        raise ValueError(f"max_len must be at most {MAX_POSITIONS:,} (the positional table holds max_len x d_model "
                         f"numbers), got {config['max_len']:,}{hint}")
    layers = max(config["n_layers"], getattr(parts, "dec_layers", None) or 0)
    if layers > MAX_LAYERS:
        raise ValueError(f"{what} would have {layers:,} layers; the course's tools stop at "
                         f"{MAX_LAYERS:,} (each layer's modules take memory whatever their width){hint}")
    try:
        n = transformer_parameters(config, parts)
    except (RuntimeError, OverflowError, TypeError):         # a size too large for PyTorch even to describe
        raise ValueError(f"{what} is too large to build: its tensors overflow PyTorch's sizes; the course's tools "
                         f"stop at {MAX_PARAMETERS:,} parameters{hint}") from None
    need = n * (BYTES_TO_TRAIN if training else BYTES_TO_RUN)
    task = "to train" if training else "to load"
    if n > MAX_PARAMETERS:
        raise ValueError(f"{what} would have {n:,} parameters and need about {gigabytes(need)} {task}; the "
                         f"course's tools stop at {MAX_PARAMETERS:,} parameters{hint}")
    memory = machine_memory()
    if memory is not None and need > memory:
        raise ValueError(f"{what} would have {n:,} parameters and need about {gigabytes(need)} {task}, more "
                         f"than this machine's {gigabytes(memory)} of memory{hint}")
    return n
