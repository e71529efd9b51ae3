"""What a Transformer costs before it exists: its parameters counted from the config by arithmetic, the
memory they take, and the ceilings the tools hold to (parameters, and layers). A size typed by mistake (`--d-model 1000000`) or
read from a crafted checkpoint (`n_layers = 10**7`) is refused in one line, before any memory is taken.
"""
import os
from dataclasses import fields
from typing import get_args, get_type_hints

MAX_PARAMETERS = 1_000_000_000        # the tools' ceiling: 4 GB of fp32 weights, about 16 GB to train
MAX_LAYERS = 1_000                    # each block costs Python objects (about 200 KB) whatever its width
BYTES_TO_TRAIN = 16                   # per parameter: fp32 weights, gradients and Adam's two moments
BYTES_TO_RUN = 4                      # per parameter: fp32 weights


def transformer_parameters(d_model: int, d_ff: int, n_layers: int, src_vocab_size: int, tgt_vocab_size: int,
                           n_heads: int = 4, norm_first: bool = False, tie_embeddings: bool = False,
                           norm: str = "layer", ffn: str = "relu", kv_heads: int | None = None, **_) -> int:
    """The number of parameters of `Transformer(TransformerConfig(...))`, counted as chapter 7 builds it,
    with chapter 12's switches (Python integers: no overflow, whatever the sizes)."""
    D, F = d_model, d_ff
    kv = (kv_heads or n_heads) * (D // n_heads)                    # width of W_k and W_v
    attention = 2 * (D * D + D) + 2 * (D * kv + kv)                 # W_q, W_o; W_k, W_v; with biases
    ffn_params = 3 * D * F if ffn == "swiglu" else D * F + F + F * D + D   # SwiGLU has no biases
    norm_params = D if norm == "rms" else 2 * D                     # RMSNorm: a gain, no bias
    encoder_block = attention + ffn_params + 2 * norm_params
    decoder_block = 2 * attention + ffn_params + 3 * norm_params    # self-attention and cross-attention
    total = (src_vocab_size * D + tgt_vocab_size * D + D * tgt_vocab_size + tgt_vocab_size
             + n_layers * (encoder_block + decoder_block) + (2 * norm_params if norm_first else 0))
    return total - (2 * tgt_vocab_size * D if tie_embeddings else 0)     # one matrix read three times


def machine_memory() -> int | None:
    """This machine's memory in bytes (None where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def gigabytes(n: float) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e8 else f"{n / 1e6:,.0f} MB"


def check_model_size(config: dict, *, training: bool, what: str = "the model", hint: str = "") -> int:
    """The parameter count of the Transformer `config` (a dict of `TransformerConfig` fields) describes;
    `ValueError` naming the estimated memory when it passes `MAX_PARAMETERS` or this machine's memory,
    or when it has more than `MAX_LAYERS` layers."""
    if config["n_layers"] > MAX_LAYERS:
        raise ValueError(f"{what} would have {config['n_layers']:,} layers; the course's tools stop at "
                         f"{MAX_LAYERS:,} (each layer's modules take memory whatever their width){hint}")
    n = transformer_parameters(**config)
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


def field_errors(values: dict, cls, *, known_only: bool = False) -> list[str]:
    """The entries of `values` whose type does not fit the field of dataclass `cls` they name ('d_model:
    expected int, got 32.0'); with `known_only`, entries that are not fields are let through."""
    hints, errors = get_type_hints(cls), []
    names = {f.name for f in fields(cls)}
    for key, value in values.items():
        if key not in names:
            if not known_only:
                errors.append(f"{key}: not a setting of {cls.__name__}")
            continue
        kinds = get_args(hints[key]) or (hints[key],)             # int | None -> (int, NoneType)
        if not any(fits(value, kind) for kind in kinds):
            wanted = " or ".join("None" if k is type(None) else k.__name__ for k in kinds)
            errors.append(f"{key}: expected {wanted}, got {value!r:.40}")
    return errors


def fits(value, kind) -> bool:
    if kind is type(None):
        return value is None
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind)
