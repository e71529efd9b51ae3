"""Run once (2026-11-25): the published model's weights renamed for chapter 7's blocks
as they read now.

The blocks used to wrap each sublayer's LayerNorm in a `Residual` module
(`res_attn.norm`, ...); they now hold the norms themselves (`norm1`, `norm2`, `norm3`),
as the equations name them. The tensors are unchanged.

    python experiments/rename_published_keys.py models/tatoeba-en-fr/model.safetensors
"""

import re
import sys

from safetensors.torch import load_file, save_file
from safetensors import safe_open

RENAMES = {
    "encoder": {"res_attn": "norm1", "res_ffn": "norm2"},
    "decoder": {"res_self": "norm1", "res_cross": "norm2", "res_ffn": "norm3"},
}
OLD = re.compile(r"^(encoder|decoder)\.blocks\.(\d+)\.(res_\w+)\.norm\.(weight|bias)$")


def renamed(name: str) -> str:
    match = OLD.match(name)
    if not match:
        return name
    side, layer, old, what = match.groups()
    return f"{side}.blocks.{layer}.{RENAMES[side][old]}.{what}"


def main(path: str):
    with safe_open(path, framework="pt") as f:
        metadata = f.metadata()
    weights = load_file(path)
    new = {renamed(k): v for k, v in weights.items()}
    assert len(new) == len(weights)
    save_file(new, path, metadata=metadata)
    print(
        f"{path}: {sum(renamed(k) != k for k in weights)} of {len(weights)} tensors"
        " renamed"
    )


if __name__ == "__main__":
    main(sys.argv[1])
