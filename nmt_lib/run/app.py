"""Chapter 8's translator app: `explore` (one sentence, every attention map),
`draw_attention` (one heatmap), `TranslatorApp` (ipywidgets), `static_views` (the book's
HTML). Maps are (layers, heads, queries, keys), as `Transformer.attention_maps` gives.
"""

import base64
import html
import io
import time
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import torch

from nmt_lib.decoding import MAX_LEN
from nmt_lib.fast import greedy_decode_fast
from nmt_lib.evaluation import beam_trace, trace_path
from nmt_lib.plot import show_heatmaps
from nmt_lib.model_helpers import model_device
from nmt_lib.text import preprocess

KINDS = {
    "cross-attention": ("cross", "keys (English)", "queries (French input)"),
    "encoder self-attention": ("encoder", "keys (English)", "queries (English)"),
    "decoder masked self-attention": (
        "decoder_self",
        "keys (French so far)",
        "queries (French input)",
    ),
}


@dataclass
class Exploration:
    """One translated sentence and everything the app shows about it."""

    sentence: str
    src_tokens: list  # the English tokens the model read, <eos> included
    tgt_tokens: list  # the decoder's inputs: <bos>, then the translation's tokens
    out_tokens: list  # the translation's tokens, and <eos> if the model ended it
    translation: str
    maps: dict  # "encoder", "decoder_self", "cross" -> (layers, heads, queries, keys)
    # what was done to the input, one line each
    notes: list = field(default_factory=list)
    # beam search: (translation, log p, score), best first
    hypotheses: list = field(default_factory=list)


def explore(
    model,
    src_vocab,
    tgt_vocab,
    text: str,
    *,
    beam_size: int = 1,
    alpha: float = 1.0,
    max_len: int = MAX_LEN,
    max_src_len: int = 100,
    prepare=preprocess,
) -> Exploration:
    """Translate `text` greedily (`beam_size` 1) or with beam search and collect every
    attention map; `prepare` is the model's own preprocessing (a published model keeps
    case). Empty or punctuation-only text is a one-line ValueError; a sentence over
    `max_src_len` tokens is cut, and unknown tokens are noted."""
    if not text or not text.strip():
        raise ValueError("Type an English sentence first.")
    tokens = src_vocab.split(prepare(text.strip()))
    if not any(ch.isalnum() for t in tokens for ch in t):
        raise ValueError("There is only punctuation here: nothing to translate.")
    notes = []
    if len(tokens) > max_src_len:
        notes.append(
            f"Cut to its first {max_src_len} of {len(tokens)} tokens, the most this app"
            " reads."
        )
        tokens = tokens[:max_src_len]
    unknown = [
        t
        for t in dict.fromkeys(tokens)
        if src_vocab[t] == src_vocab.unk_id or t.startswith("<0x")
    ]
    if unknown:
        notes.append(
            "Not in the model's vocabulary (read as <unk>, or as bytes by a subword "
            "model): " + ", ".join(unknown[:8]) + (" ..." if len(unknown) > 8 else "")
        )
    device = model_device(model)
    ids = src_vocab[tokens] + [src_vocab.eos_id]
    src = torch.tensor([ids], device=device)
    src_len = torch.tensor([len(ids)], device=device)
    bos, eos = tgt_vocab.bos_id, tgt_vocab.eos_id
    search = dict(bos_id=bos, eos_id=eos, max_len=max_len)
    hypotheses = []
    if beam_size > 1:
        out, nodes = beam_trace(model, ids, beam_size=beam_size, alpha=alpha, **search)
        for j, node in enumerate(nodes):
            if node.get("final"):
                path = [t for t in trace_path(nodes, j)[1:] if t != eos]
                text = tgt_vocab.detokenize(tgt_vocab.to_tokens(path))
                hypotheses.append((text, node["logp"], node["score"]))
        hypotheses.sort(key=lambda h: -h[2])
    else:
        out = greedy_decode_fast(model, src, src_len, **search).tokens[0]
    ended = len(out) < max_len
    tgt_in = torch.tensor([[bos] + out], device=device)
    # (L, H, Tq, Tk)
    maps = {
        k: torch.cat(v).cpu()
        for k, v in model.attention_maps(src, src_len, tgt_in).items()
    }
    out_tokens = tgt_vocab.to_tokens(out) + (["<eos>"] if ended else [])
    return Exploration(
        text,
        src_vocab.to_tokens(ids),
        tgt_vocab.to_tokens([bos] + out),
        out_tokens,
        tgt_vocab.detokenize(tgt_vocab.to_tokens(out)),
        maps,
        notes,
        hypotheses,
    )


def token_labels(exp: Exploration, key: str) -> tuple:
    """The (keys, queries) tokens of map `key`: English for the encoder's keys and
    queries and for cross-attention's keys, the decoder's inputs otherwise."""
    return (
        exp.src_tokens if key in ("encoder", "cross") else exp.tgt_tokens,
        exp.src_tokens if key == "encoder" else exp.tgt_tokens,
    )


def draw_attention(
    exp: Exploration, kind="cross-attention", layer=1, head=None, *, size=4.2
):
    """One heatmap of `exp`: `kind` (a key of KINDS), `layer` and `head` counted from 1;
    `head=None` averages the layer's heads. Returns the figure."""
    key, xlabel, ylabel = KINDS[kind]
    layers, heads = exp.maps[key].shape[:2]
    if not 1 <= layer <= layers:  # 0 or -1 would index from the end: the last layer
        raise ValueError(f"layer is counted from 1 to {layers}, got {layer}")
    if head is not None and not 1 <= head <= heads:
        raise ValueError(
            f"head is counted from 1 to {heads} (or None for their average), got {head}"
        )
    weights = exp.maps[key][layer - 1]  # (H, Tq, Tk)
    matrix = weights.mean(0) if head is None else weights[head - 1]
    x, y = token_labels(exp, key)
    which = "average of the heads" if head is None else f"head {head}"
    title = f"{kind}, layer {layer}, {which}"
    return show_heatmaps(
        matrix[None, None],
        xlabel,
        ylabel,
        titles=[title],
        x_tokens=x,
        y_tokens=y,
        figsize=(size, size * 0.85),
    )


def figure_png(fig, dpi: int = 80) -> bytes:
    """`fig` as PNG bytes; the figure is closed."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


WORD_START = "\u2581"  # SentencePiece's mark of a piece that starts a word (chapter 8b)


def hover_html(exp: Exploration) -> str:
    """The translation as one span per token, whose tooltip names the English token the
    last layer's cross-attention (mean of heads) weighed most; subword pieces are joined
    into the words they make."""
    cross = exp.maps["cross"][-1].mean(0)  # (Tq, Tk)
    pieces = any(t.startswith(WORD_START) for t in exp.out_tokens)
    out = []
    for j, token in enumerate(exp.out_tokens):
        k = int(cross[j].argmax())
        source = exp.src_tokens[k].removeprefix(WORD_START)
        tip = (
            f"written while looking most at '{source}' "
            f"({float(cross[j, k]):.0%} of the weight; where the model looked, not why "
            "it wrote this word)"
        )
        starts = not pieces or token.startswith(WORD_START) or token == "<eos>"
        gap = " " if starts and out else ""
        out.append(
            f'{gap}<span class="nmt-token" title="{html.escape(tip)}" '
            'style="padding:1px 0;border-bottom:1px dotted #888;cursor:help">'
            f"{html.escape(token.removeprefix(WORD_START))}</span>"
        )
    return "".join(out)


class TranslatorApp:
    """Type a sentence, translate it, explore its attention (`explore`, given
    `prepare`). Shown by `app.widget`, or `app` as a cell's last line."""

    def __init__(
        self,
        model,
        src_vocab,
        tgt_vocab,
        *,
        example: str = "",
        max_len: int = MAX_LEN,
        prepare=preprocess,
    ):
        import ipywidgets as w  # only the app needs ipywidgets

        self.model, self.src_vocab, self.tgt_vocab = model, src_vocab, tgt_vocab
        self.max_len, self.prepare = max_len, prepare
        layers, heads = self.layers("cross-attention"), model.cfg.n_heads
        self.text = w.Text(
            value=example,
            placeholder="Type an English sentence",
            description="English:",
            continuous_update=False,
            layout=w.Layout(width="60%"),
        )
        self.button = w.Button(description="Translate", button_style="primary")
        self.search = w.ToggleButtons(
            options=["greedy", "beam search"], value="greedy", description="Search:"
        )
        self.beam = w.IntSlider(
            value=4, min=2, max=8, description="K:", layout=w.Layout(width="220px")
        )
        self.kind = w.Dropdown(
            options=list(KINDS), value="cross-attention", description="Attention:"
        )
        self.layer = w.Dropdown(
            options=list(range(1, layers + 1)),
            value=layers,
            description="Layer:",
            layout=w.Layout(width="160px"),
        )
        self.head = w.Dropdown(
            options=[("average", None)] + [(str(h), h) for h in range(1, heads + 1)],
            value=None,
            description="Head:",
            layout=w.Layout(width="180px"),
        )
        self.message = w.HTML()
        self.translation = w.HTML()
        self.hypotheses = w.HTML()
        self.image = w.Image(format="png", layout=w.Layout(max_width="460px"))
        self.timing = w.HTML()
        self.exploration, self._key = None, None
        self.button.on_click(lambda _: self.translate())
        # Enter (or leaving the box)
        self.text.observe(lambda _: self.translate(), names="value")
        for control in (self.search, self.beam):
            control.observe(lambda _: self.translate(), names="value")
        self.kind.observe(lambda _: self.choose_layers(), names="value")
        for control in (self.kind, self.layer, self.head):
            control.observe(lambda _: self.redraw(), names="value")
        self.widget = w.VBox(
            [
                w.HBox([self.text, self.button]),
                w.HBox([self.search, self.beam]),
                self.message,
                self.translation,
                self.hypotheses,
                w.HBox([self.kind, self.layer, self.head]),
                self.image,
                self.timing,
            ],
            layout=w.Layout(border="1px solid #ccc", padding="8px"),
        )
        self.widget.add_class("nmt-translator")
        if example:
            self.translate()

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)

    def translate(self):
        """Translate the text box's sentence with the chosen search, unless that was
        just done."""
        beam = self.beam.value if self.search.value == "beam search" else 1
        key = (self.text.value, beam)
        if key == self._key:
            return
        self._key = key
        try:
            self.exploration = explore(
                self.model,
                self.src_vocab,
                self.tgt_vocab,
                self.text.value,
                beam_size=beam,
                max_len=self.max_len,
                prepare=self.prepare,
            )
        except ValueError as e:
            self.exploration = None
            self.message.value = (
                f'<span style="color:#b00">{html.escape(str(e))}</span>'
            )
            self.translation.value = self.hypotheses.value = self.timing.value = ""
            self.image.value = b""
            return
        exp = self.exploration
        self.message.value = "<br>".join(
            f'<span style="color:#a60">{html.escape(n)}</span>' for n in exp.notes
        )
        self.translation.value = f"<b>French:</b> {hover_html(exp)}"
        rows = "".join(
            f"<tr><td>{html.escape(t)}</td><td>{lp:.2f}</td><td>{s:.3f}</td></tr>"
            for t, lp, s in exp.hypotheses
        )
        head = "<tr><th>beam hypothesis</th><th>log p</th><th>log p / length</th></tr>"
        self.hypotheses.value = f"<table>{head}{rows}</table>" if rows else ""
        self.redraw()

    def layers(self, kind: str) -> int:
        """The encoder's blocks, or the decoder's (which may be fewer)."""
        side = "encoder" if KINDS[kind][0] == "encoder" else "decoder"
        return len(getattr(self.model, side).blocks)

    def choose_layers(self):
        layers, chosen = self.layers(self.kind.value), self.layer.value
        self.layer.options = list(range(1, layers + 1))
        self.layer.value = min(chosen, layers)

    def redraw(self):
        """Draw the chosen kind, layer and head of the current translation."""
        if self.exploration is None:
            return
        start = time.perf_counter()
        self.image.value = figure_png(
            draw_attention(
                self.exploration, self.kind.value, self.layer.value, self.head.value
            )
        )
        seconds = time.perf_counter() - start
        self.timing.value = (
            f'<span style="color:#888">drawn in {seconds * 1000:.0f} ms</span>'
        )


def static_views(
    model, src_vocab, tgt_vocab, sentences, *, dpi: int = 60, prepare=preprocess
) -> str:
    """HTML for a page without a kernel: each sentence's translation and its three kinds
    of attention (every layer and head) behind CSS-only tabs. `prepare` as in
    `explore`."""
    parts, rules = [], []
    for s, sentence in enumerate(sentences):
        exp = explore(model, src_vocab, tgt_vocab, sentence, prepare=prepare)
        tabs, panels = [], []
        for k, (kind, (key, xlabel, ylabel)) in enumerate(KINDS.items()):
            x, y = token_labels(exp, key)
            L, H = exp.maps[key].shape[:2]
            titles = [
                f"layer {i}, head {h}" for i in range(1, L + 1) for h in range(1, H + 1)
            ]
            png = figure_png(
                show_heatmaps(
                    exp.maps[key],
                    xlabel,
                    ylabel,
                    titles=titles,
                    x_tokens=x,
                    y_tokens=y,
                    suptitle=f"{kind}: {sentence}",
                ),
                dpi=dpi,
            )
            tab = f"nmt-v{s}-{k}"
            tabs.append(
                f'<input type="radio" name="nmt-v{s}" id="{tab}"'
                f'{" checked" if k == 0 else ""} class="nmt-radio">'
                f'<label for="{tab}" class="nmt-tab">{kind}</label>'
            )
            panels.append(
                f'<div class="nmt-panel nmt-panel-{k}">'
                f'<img alt="{html.escape(kind)}: {html.escape(sentence)}" '
                f'src="data:image/png;base64,{base64.b64encode(png).decode()}"></div>'
            )
            rules.append(
                f"#{tab}:checked ~ .nmt-panel-{k} {{display:block}} #{tab}:checked +"
                " label {background:#dde6f5}"
            )
        parts.append(
            f'<div class="nmt-view"><p><b>{html.escape(sentence)}</b> &rarr; '
            f"{html.escape(exp.translation)}</p>"
            + "".join(tabs)
            + "".join(panels)
            + "</div>"
        )
    css = (
        ".nmt-view{margin:0.8em 0} .nmt-radio{display:none} "
        ".nmt-tab{display:inline-block;padding:2px 10px;margin-right:4px;"
        "border:1px solid #bbb;border-radius:4px;cursor:pointer} "
        ".nmt-panel{display:none;margin-top:6px} .nmt-panel img{max-width:100%}"
    )
    return f"<style>{css} {' '.join(rules)}</style>" + "".join(parts)
