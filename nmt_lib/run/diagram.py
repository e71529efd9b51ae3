"""The Transformer drawn as labelled boxes for chapter 7's figure (drawing code, not a
lesson): each box names the module that computes it, read from a real model, so the
figure cannot drift from the code.
"""

import matplotlib.pyplot as plt


def draw_transformer(model, *, title="The Transformer, as nmt_lib builds it"):
    """Draw an encoder-decoder `Transformer` as boxes, each with its module's attribute
    path and class read from `model` (post-norm as in the paper; with `norm_first` each
    side ends in a LayerNorm). Returns the figure."""
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    fig, ax = plt.subplots(figsize=(9.5, 7.6))
    width, height = 3.7, 0.6
    centred = dict(ha="center", va="center")

    def box(x, y, path, note, color):
        kind = type(model.get_submodule(path)).__name__  # fails loudly if misnamed
        corner = (x - width / 2, y - height / 2)
        style = dict(boxstyle="round,pad=0.04", fc=color, ec="0.3")
        ax.add_patch(FancyBboxPatch(corner, width, height, **style))
        name = path.split(".")[-1] if "blocks" in path else path
        ax.text(
            x, y + 0.1, f"{name}: {kind}", **centred, fontsize=8.5, family="monospace"
        )
        ax.text(x, y - 0.15, note, **centred, fontsize=7.5, color="0.25")

    def arrow(x0, y0, x1, y1, **kw):
        style = dict(arrowstyle="-|>", mutation_scale=10, lw=1)
        ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), **style, **kw))

    def column(x, prefix, inputs, layers, frame_label):
        ax.text(x, 0.45, inputs, ha="center", fontsize=8.5)
        y = 1.3
        arrow(x, 0.65, x, y - height / 2)
        embedding = "token ids -> vectors, times sqrt(d_model)"
        for path, note, color in [
            (f"{prefix}.embedding", embedding, "#f3e5c0"),
            (f"{prefix}.pos", "+ sinusoidal positions, dropout (chapter 6)", "#f3e5c0"),
        ]:
            box(x, y, path, note, color)
            # room for the blocks' frame
            step = 0.8 if path.endswith("embedding") else 1.15
            arrow(x, y + height / 2, x, y + step - height / 2)
            y += step
        first, rows = y, {}
        for name, note, color in layers:
            rows[name] = y
            box(x, y, f"{prefix}.blocks.0.{name}", note, color)
            if name.startswith("norm"):  # residual: from the sublayer's input
                left = x - width / 2 - 0.15
                ax.plot([left] * 2, [y - 1.2, y], color="0.55", lw=1)
                ax.plot([left, x], [y - 1.2, y - 1.2], color="0.55", lw=1)
                arrow(left, y, x - width / 2, y, color="0.55")
            arrow(x, y + height / 2, x, y + 0.8 - height / 2)
            y += 0.8
        corner = (x - width / 2 - 0.35, first - 0.75)
        size = (width + 0.7, y - first + 0.3)
        style = dict(boxstyle="round,pad=0.02", fc="none", ec="0.5", ls="--")
        ax.add_patch(FancyBboxPatch(corner, *size, **style))
        # beside the frame, clear of the arrows
        beside = (x + width / 2 + 0.42, (first - 0.75 + y - 0.45) / 2)
        side = dict(rotation=90, ha="left", va="center", fontsize=8, color="0.35")
        ax.text(*beside, frame_label, **side)
        box(x, y, f"{prefix}.norm", "LayerNorm with pre-norm, else Identity", "#e8e8e8")
        return y, rows

    add_norm = "add the input, then this LayerNorm"
    ffn = "Linear -> ReLU -> Linear, per position"
    ex, dx = 2.45, 7.85
    enc_top, _ = column(
        ex,
        "encoder",
        "English token ids (B, S)",
        [
            ("self_attn", "self-attention over the source, padding masked", "#cfe0f5"),
            ("norm1", add_norm, "#e8e8e8"),
            ("ffn", ffn, "#d5ecd4"),
            ("norm2", add_norm, "#e8e8e8"),
        ],
        f"encoder.blocks: {len(model.encoder.blocks)} x "
        f"{type(model.encoder.blocks[0]).__name__}",
    )
    dec_top, dec_rows = column(
        dx,
        "decoder",
        "French so far: <bos> y1 ... (B, T)",
        [
            ("self_attn", "masked self-attention (KV cache when decoding)", "#cfe0f5"),
            ("norm1", add_norm, "#e8e8e8"),
            ("cross_attn", "queries: French; keys, values: the memory", "#f5d0cf"),
            ("norm2", add_norm, "#e8e8e8"),
            ("ffn", ffn, "#d5ecd4"),
            ("norm3", add_norm, "#e8e8e8"),
        ],
        f"decoder.blocks: {len(model.decoder.blocks)} x "
        f"{type(model.decoder.blocks[0]).__name__}",
    )
    arrow(dx, dec_top + height / 2, dx, dec_top + 0.8 - height / 2)
    box(dx, dec_top + 0.8, "decoder.dense", "d_model -> V scores (logits)", "#f3e5c0")
    arrow(dx, dec_top + 0.8 + height / 2, dx, dec_top + 1.35)
    softmax = "softmax: p(next French token) (B, T, V)"
    ax.text(dx, dec_top + 1.45, softmax, ha="center", fontsize=8.5)
    memory = dict(arrowstyle="-|>", mutation_scale=12, lw=1.6, color="tab:red")
    ends = (ex + width / 2, enc_top), (dx - width / 2, dec_rows["cross_attn"])
    ax.add_patch(FancyArrowPatch(*ends, **memory, connectionstyle="arc3,rad=-0.2"))
    note = "memory (B, S, D):\nto every decoder block"
    red = dict(ha="right", fontsize=8, color="tab:red")
    ax.text(dx - width / 2 - 0.45, enc_top + 0.6, note, **red)
    ax.set(xlim=(0, 10.4), ylim=(0, dec_top + 1.8), title=title)
    ax.axis("off")
    return fig
