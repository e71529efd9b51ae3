"""The Transformer drawn as labelled boxes, for chapter 7's figure: drawing code, not a
lesson.

Each box names the module that computes it, read from a real model, so the figure cannot
drift from the code.
"""

import matplotlib.pyplot as plt


def draw_transformer(model, *, title="The Transformer, as nmt_lib builds it"):
    """Draw an encoder-decoder `Transformer` as labelled boxes: each box gives the
    attribute path of its module in `model` and the module's class, both read from
    `model` itself (post-norm shown as in the paper; with `norm_first` the encoder and
    decoder end in a LayerNorm). Returns the figure."""
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    fig, ax = plt.subplots(figsize=(9.5, 7.6))
    width, height = 3.7, 0.6

    def box(x, y, path, note, color):
        # fails loudly if the name is wrong
        kind = type(model.get_submodule(path)).__name__
        ax.add_patch(
            FancyBboxPatch(
                (x - width / 2, y - height / 2),
                width,
                height,
                boxstyle="round,pad=0.04",
                fc=color,
                ec="0.3",
            )
        )
        ax.text(
            x,
            y + 0.1,
            f"{path.split('.')[-1] if 'blocks' in path else path}: {kind}",
            ha="center",
            va="center",
            fontsize=8.5,
            family="monospace",
        )
        ax.text(x, y - 0.15, note, ha="center", va="center", fontsize=7.5, color="0.25")

    def arrow(x0, y0, x1, y1, **kw):
        ax.add_patch(
            FancyArrowPatch(
                (x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=10, lw=1, **kw
            )
        )

    def column(x, prefix, inputs, layers, frame_label, top):
        ax.text(x, 0.45, inputs, ha="center", fontsize=8.5)
        y = 1.3
        arrow(x, 0.65, x, y - height / 2)
        for path, note, color in [
            (
                f"{prefix}.embedding",
                "token ids -> vectors, times sqrt(d_model)",
                "#f3e5c0",
            ),
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
                ax.plot([x - width / 2 - 0.15] * 2, [y - 1.2, y], color="0.55", lw=1)
                ax.plot(
                    [x - width / 2 - 0.15, x], [y - 1.2, y - 1.2], color="0.55", lw=1
                )
                arrow(x - width / 2 - 0.15, y, x - width / 2, y, color="0.55")
            arrow(x, y + height / 2, x, y + 0.8 - height / 2)
            y += 0.8
        ax.add_patch(
            FancyBboxPatch(
                (x - width / 2 - 0.35, first - 0.75),
                width + 0.7,
                y - first + 0.3,
                boxstyle="round,pad=0.02",
                fc="none",
                ec="0.5",
                ls="--",
            )
        )
        ax.text(
            x + width / 2 + 0.42,
            (first - 0.75 + y - 0.45) / 2,
            frame_label,
            rotation=90,
            ha="left",  # beside the frame, clear of the arrows
            va="center",
            fontsize=8,
            color="0.35",
        )
        box(x, y, f"{prefix}.norm", "LayerNorm with pre-norm, else Identity", "#e8e8e8")
        return y, rows

    n = len(model.encoder.blocks)
    ex, dx = 2.45, 7.85
    enc_top, _ = column(
        ex,
        "encoder",
        "English token ids (B, S)",
        [
            ("self_attn", "self-attention over the source, padding masked", "#cfe0f5"),
            ("norm1", "add the input, then this LayerNorm", "#e8e8e8"),
            ("ffn", "Linear -> ReLU -> Linear, per position", "#d5ecd4"),
            ("norm2", "add the input, then this LayerNorm", "#e8e8e8"),
        ],
        f"encoder.blocks: {n} x {type(model.encoder.blocks[0]).__name__}",
        0,
    )
    dec_top, dec_rows = column(
        dx,
        "decoder",
        "French so far: <bos> y1 ... (B, T)",
        [
            ("self_attn", "masked self-attention (KV cache when decoding)", "#cfe0f5"),
            ("norm1", "add the input, then this LayerNorm", "#e8e8e8"),
            ("cross_attn", "queries: French; keys, values: the memory", "#f5d0cf"),
            ("norm2", "add the input, then this LayerNorm", "#e8e8e8"),
            ("ffn", "Linear -> ReLU -> Linear, per position", "#d5ecd4"),
            ("norm3", "add the input, then this LayerNorm", "#e8e8e8"),
        ],
        f"decoder.blocks: {len(model.decoder.blocks)} x "
        f"{type(model.decoder.blocks[0]).__name__}",
        0,
    )
    arrow(dx, dec_top + height / 2, dx, dec_top + 0.8 - height / 2)
    box(dx, dec_top + 0.8, "decoder.dense", "d_model -> V scores (logits)", "#f3e5c0")
    arrow(dx, dec_top + 0.8 + height / 2, dx, dec_top + 1.35)
    ax.text(
        dx,
        dec_top + 1.45,
        "softmax: p(next French token) (B, T, V)",
        ha="center",
        fontsize=8.5,
    )
    cross_y = dec_rows["cross_attn"]
    ax.add_patch(
        FancyArrowPatch(
            (ex + width / 2, enc_top),
            (dx - width / 2, cross_y),
            arrowstyle="-|>",
            mutation_scale=12,
            lw=1.6,
            color="tab:red",
            connectionstyle="arc3,rad=-0.2",
        )
    )
    ax.text(
        dx - width / 2 - 0.45,
        enc_top + 0.6,
        "memory (B, S, D):\nto every decoder block",
        ha="right",
        fontsize=8,
        color="tab:red",
    )
    ax.set(xlim=(0, 10.4), ylim=(0, dec_top + 1.8), title=title)
    ax.axis("off")
    return fig
