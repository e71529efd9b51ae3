"""nmt_lib.run.app (explore, draw_attention, TranslatorApp, static_views) and chapter
8's beam_trace, on a small untrained Transformer."""

import pytest
import torch

from nmt_lib.decoding import beam_search, greedy_decode, translate
from nmt_lib.evaluation import beam_trace, sequence_scores, trace_path
from nmt_lib.modern import ModernTransformer
from nmt_lib.text import Vocab
from nmt_lib.transformer import Transformer, TransformerConfig
from nmt_lib.run.app import KINDS, TranslatorApp, draw_attention, explore, static_views

EN = [
    "i am cold .",
    "he is here .",
    "we are in the house .",
    "go !",
    "i like big cats .",
]
FR = ["j'ai froid .", "il est ici .", "nous sommes dans la maison .", "va !"]
FR += ["j'aime les gros chats ."]


def model_for(src, tgt, seed=0, n_layers=2, parts=None):
    """An untrained Transformer of width 16 between two vocabularies."""
    torch.manual_seed(seed)
    sizes = dict(d_model=16, n_heads=2, d_ff=32, n_layers=n_layers)
    cfg = TransformerConfig(len(src), len(tgt), **sizes)
    return (Transformer(cfg) if parts is None else ModernTransformer(cfg, parts)).eval()


@pytest.fixture(scope="module")
def tiny():
    src, tgt = Vocab(EN), Vocab(FR)
    return model_for(src, tgt), src, tgt


def test_explore_translates_and_returns_every_map(tiny):
    model, src, tgt = tiny
    exp = explore(model, src, tgt, "We are in the house.")
    # the same max_len
    assert exp.translation == translate(model, ["We are in the house."], src, tgt)[0]
    assert exp.src_tokens == "we are in the house . <eos>".split()
    S, T = len(exp.src_tokens), len(exp.tgt_tokens)
    assert exp.tgt_tokens[0] == "<bos>" and len(exp.out_tokens) in (T - 1, T)
    assert exp.maps["encoder"].shape == (2, 2, S, S)
    assert exp.maps["decoder_self"].shape == (2, 2, T, T)
    assert exp.maps["cross"].shape == (2, 2, T, S)
    assert torch.allclose(exp.maps["cross"].sum(-1), torch.ones(2, 2, T))
    assert exp.notes == [] and exp.hypotheses == []


def test_explore_the_app_and_the_static_views_read_text_as_the_model_does(tiny):
    model, src, tgt = tiny
    as_written = lambda text: text  # a model that keeps case (a published one's own)
    # the course's lowercasing
    assert explore(model, src, tgt, "He is here.").src_tokens[0] == "he"
    kept = explore(model, src, tgt, "He is here .", prepare=as_written)
    # "He", as written, is not in this vocabulary
    assert kept.src_tokens[0] == "<unk>" and "He" in kept.notes[0]
    app = TranslatorApp(model, src, tgt, example="He is here .", prepare=as_written)
    assert app.exploration.src_tokens == kept.src_tokens
    seen = []
    static_views(
        model, src, tgt, ["He is here ."], prepare=lambda t: seen.append(t) or t
    )
    assert seen == ["He is here ."]  # the views read it as told, too


def test_draw_attention_labels_the_tokens_and_averages_heads(tiny):
    exp = explore(*tiny, "he is here .")
    for kind in KINDS:
        fig = draw_attention(exp, kind, layer=2, head=1)
        ax = fig.axes[0]
        keys = (
            exp.tgt_tokens
            if kind == "decoder masked self-attention"
            else exp.src_tokens
        )
        assert [t.get_text() for t in ax.get_xticklabels()] == keys
        assert "layer 2, head 1" in ax.get_title()
    image = draw_attention(exp, "cross-attention", layer=1).axes[0].images[0]
    mean = exp.maps["cross"][0].mean(0).float()  # heads averaged
    assert torch.allclose(torch.as_tensor(image.get_array().data), mean, atol=1e-6)


def test_the_app_translates_redraws_and_shows_messages(tiny):
    app = TranslatorApp(*tiny, example="i am cold .")
    assert 'class="nmt-token"' in app.translation.value and app.message.value == ""
    first = app.image.value
    assert first[:4] == b"\x89PNG"
    app.layer.value = 1  # an observer redraws the heatmap
    assert app.image.value != first
    app.head.value = 2
    assert app.image.value[:4] == b"\x89PNG"
    app.search.value = "beam search"  # translates again, with hypotheses
    assert "<table>" in app.hypotheses.value
    app.text.value = "?!"
    assert "only punctuation" in app.message.value  # a one-line message a user reads
    assert app.translation.value == "" and app.image.value == b""
    app.text.value = "he is here ."
    assert app.message.value == "" and app.image.value[:4] == b"\x89PNG"


def test_a_shallow_decoder_decodes_at_its_depth_and_the_app_offers_each_its_layers(
    tiny,
):
    from nmt_lib.modern import ModernParts  # chapter 12's decoder depth

    _, src, tgt = tiny
    model = model_for(src, tgt, n_layers=3, parts=ModernParts(dec_layers=1))
    assert (len(model.encoder.blocks), len(model.decoder.blocks)) == (3, 1)
    maps = explore(model, src, tgt, "he is here .").maps
    assert maps["encoder"].shape[0] == 3
    assert maps["cross"].shape[0] == maps["decoder_self"].shape[0] == 1
    app = TranslatorApp(model, src, tgt, example="he is here .")
    assert app.layer.options == (1,)
    app.kind.value = "encoder self-attention"
    app.layer.value = 3
    assert app.image.value[:4] == b"\x89PNG"
    app.kind.value = "cross-attention"  # layer 3 does not exist there: back to 1
    assert app.layer.value == 1 and app.image.value[:4] == b"\x89PNG"


def test_static_views_need_no_javascript(tiny):
    page = static_views(*tiny, ["i am cold .", "go !"])
    assert "<script" not in page
    n = 2 * len(KINDS)  # a view of each kind for each sentence
    assert page.count('type="radio"') == page.count("data:image/png;base64,") == n
    assert page.count(" checked") == 2  # one tab open per sentence


def test_beam_search_returns_its_best_beam_even_where_greedy_scores_higher(tiny):
    """One beam search, no fallback: its answer is the best finished beam of the tree it
    searched, also on the sentences where greedy decoding finds a translation the model
    scores higher."""
    _, src, tgt = tiny
    # an untrained model on which a small beam loses greedy's hypothesis
    model = model_for(src, tgt, seed=5)
    kw = dict(bos_id=tgt.bos_id, eos_id=tgt.eos_id)
    greedy_higher = 0
    for beam_size in (2, 3):
        for sentence in EN:
            ids = src[sentence.split()] + [src.eos_id]
            s, s_len = torch.tensor([ids]), torch.tensor([len(ids)])
            best, nodes = beam_trace(model, ids, beam_size=beam_size, max_len=12, **kw)
            assert sum(bool(n.get("final")) for n in nodes) == beam_size
            assert all(
                n["parent"] is None or nodes[n["parent"]]["step"] == n["step"] - 1
                for n in nodes
            )
            winner = max(
                (i for i, n in enumerate(nodes) if n.get("final")),
                key=lambda i: nodes[i]["score"],
            )
            assert best == [t for t in trace_path(nodes, winner)[1:] if t != tgt.eos_id]
            beam = beam_search(model, s, s_len, beam_size=beam_size, max_len=12, **kw)
            assert best == beam.tokens[0]
            greedy = greedy_decode(model, s, s_len, max_len=12, **kw).tokens[0]
            score = lambda h: sequence_scores(model, s, s_len, [(h, len(h) < 12)], **kw)
            greedy_higher += bool(score(greedy) > score(best) + 1e-5)
    assert greedy_higher, (
        "no sentence where greedy scores higher: the test would not see a fallback"
    )


def test_explore_takes_any_text_with_a_subword_model():
    from nmt_lib.subword import SubwordVocab

    src, tgt = SubwordVocab.learn(EN * 3, 300), SubwordVocab.learn(FR * 3, 300)
    # ü never occurred: spelled out as bytes
    exp = explore(model_for(src, tgt, n_layers=1), src, tgt, "Zürich is cold.")
    assert "<0xC3>" in exp.src_tokens and "<unk>" not in exp.src_tokens
    assert any("<0xC3>" in n for n in exp.notes)
    assert isinstance(exp.translation, str)
    assert exp.maps["cross"].shape[-1] == len(exp.src_tokens)
