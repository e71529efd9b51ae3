"""nmt_lib.seq2seq, loop and decoding: the loss, the RNN models, the training loop and
its progress bar, greedy decoding and translate."""

import pytest
import torch
from torch import nn

from nmt_lib.data import TranslationDataset, make_loader
from nmt_lib.decoding import evaluate_bleu, greedy_decode, translate
from nmt_lib.loop import TrainingDiverged, evaluate_loss, train
from nmt_lib.model_helpers import eval_mode, model_device
from nmt_lib.seq2seq import BahdanauDecoder, EncoderDecoder, GRUDecoder, GRUEncoder
from nmt_lib.seq2seq import masked_cross_entropy, xavier_init
from nmt_lib.text import Vocab

from conftest import last_drawings

PAIRS = [
    ("i am here .", "je suis là ."),
    ("go !", "va !"),
    ("i am cold .", "j'ai froid ."),
    ("he is here .", "il est là ."),
    ("i run .", "je cours ."),
    ("she is cold .", "elle a froid ."),
    ("we are here .", "nous sommes là ."),
    ("run !", "cours !"),
]


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def vocabs():
    return Vocab(s for s, _ in PAIRS), Vocab(t for _, t in PAIRS)


def model(kind="bahdanau", src_v=20, tgt_v=20, hidden=16):
    dec = {"bahdanau": BahdanauDecoder, "seq2seq": GRUDecoder}[kind]
    return xavier_init(
        EncoderDecoder(GRUEncoder(src_v, 8, hidden), dec(tgt_v, 8, hidden))
    )


# ---------------------------------------------------------------- loss


def test_loss_counts_real_tokens_only_and_ignores_padding():
    logits = torch.randn(2, 3, 7)
    target = torch.tensor([[4, 5, 2], [6, 2, 0]])
    loss, n = masked_cross_entropy(logits, target, pad_id=0)
    manual = (
        -torch.log_softmax(logits, -1)
        .gather(-1, target.unsqueeze(-1))
        .squeeze(-1)[target != 0]
        .mean()
    )
    assert n == 5 and loss.item() == pytest.approx(manual.item(), rel=1e-6)
    # 4 more padding positions
    padded_logits = torch.cat([logits, torch.randn(2, 4, 7)], dim=1)
    padded_target = torch.cat([target, torch.zeros(2, 4, dtype=torch.long)], dim=1)
    loss2, n2 = masked_cross_entropy(padded_logits, padded_target, pad_id=0)
    assert n2 == 5 and loss2.item() == pytest.approx(loss.item(), rel=1e-6)
    smoothed, _ = masked_cross_entropy(logits, target, pad_id=0, label_smoothing=0.1)
    assert smoothed.item() != pytest.approx(loss.item())


# ---------------------------------------------------------------- models


@pytest.mark.parametrize("kind", ["seq2seq", "bahdanau"])
def test_shapes_and_padding_invariance(kind):
    m = model(kind).eval()
    src = torch.tensor([[4, 5, 6, 2], [7, 2, 0, 0]])
    tgt_in = torch.tensor([[1, 5, 6], [1, 7, 0]])
    logits, _, weights = m.step(tgt_in, m.encode(src, torch.tensor([4, 2])))
    assert logits.shape == (2, 3, 20)
    alone = m(src[1:, :2], torch.tensor([2]), tgt_in[1:])
    assert torch.allclose(alone[0], logits[1], atol=1e-5)  # padding changes nothing
    if kind == "bahdanau":
        assert weights.shape == (2, 3, 4) and torch.all(weights[1, :, 2:] == 0)
        assert torch.allclose(weights.sum(-1), torch.ones(2, 3))
    else:
        assert weights is None


def test_xavier_init_rescales_weights_but_not_biases():
    m = EncoderDecoder(GRUEncoder(50, 8, 300), GRUDecoder(50, 8, 300))
    before = m.decoder.rnn.bias_ih_l0.clone()
    xavier_init(m)
    w = m.decoder.rnn.weight_ih_l0  # (900, 308)
    bound = (6 / (w.shape[0] + w.shape[1])) ** 0.5
    assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound
    assert torch.equal(m.decoder.rnn.bias_ih_l0, before)


# ---------------------------------------------------------------- greedy decoding


class ScriptedDecoder(nn.Module):
    """Emits a fixed token sequence per sentence; counts its calls."""

    def __init__(self, scripts, vocab_size=10):
        super().__init__()
        self.scripts, self.vocab_size, self.calls = scripts, vocab_size, 0

    def init_state(self, memory, src_len):
        return 0

    def forward(self, tgt_in, step):
        self.calls += 1
        B, T = tgt_in.shape
        logits = torch.zeros(B, T, self.vocab_size)
        for i, script in enumerate(self.scripts):
            logits[i, -1, script[min(step, len(script) - 1)]] = 1.0
        return logits, step + 1, torch.full((B, T, 3), 1 / 3)


class NoEncoder(nn.Module):
    def forward(self, src, src_len):
        return None


def test_greedy_stops_each_sentence_at_eos_and_the_batch_when_all_end():
    decoder = ScriptedDecoder([[5, 6, 2, 7, 7, 7], [8, 2, 9, 9, 9, 9]])
    m, src = EncoderDecoder(NoEncoder(), decoder), torch.zeros(2, 3, dtype=torch.long)
    kw = dict(bos_id=1, eos_id=2, max_len=20, need_weights=True)
    out = greedy_decode(m, src, torch.tensor([3, 2]), **kw)
    assert out.tokens == [[5, 6], [8]]
    assert decoder.calls == 3  # stopped once both had produced <eos>
    # rows incl. <eos>, real source
    assert out.weights[0].shape == (3, 3) and out.weights[1].shape == (2, 2)
    long = EncoderDecoder(NoEncoder(), ScriptedDecoder([[5]]))
    kw = dict(bos_id=1, eos_id=2, max_len=4)
    assert greedy_decode(long, src[:1, :2], torch.tensor([2]), **kw).tokens == [[5] * 4]


def test_batched_and_one_at_a_time_greedy_agree():
    src_vocab, tgt_vocab = vocabs()
    m = model(src_v=len(src_vocab), tgt_v=len(tgt_vocab))
    sentences = [s for s, _ in PAIRS] + ["i am here and there .", "cold"]
    batched = translate(m, sentences, src_vocab, tgt_vocab, max_len=8)
    assert batched == [
        translate(m, [s], src_vocab, tgt_vocab, max_len=8)[0] for s in sentences
    ]


def test_translate_edge_cases():
    src_vocab, tgt_vocab = vocabs()
    m = model(src_v=len(src_vocab), tgt_v=len(tgt_vocab))
    out = translate(m, ["", "   ", "Zyzzyva!"], src_vocab, tgt_vocab, max_len=5)
    assert out[:2] == ["", ""] and len(out[2].split()) <= 5
    two = ["i am here . i am cold .", "go !"]
    with pytest.warns(UserWarning, match="max_src_len"):
        long = translate(m, two, src_vocab, tgt_vocab, max_src_len=4)
    assert long[0] == translate(m, ["i am here ."], src_vocab, tgt_vocab)[0]
    with pytest.raises(ValueError, match="list of sentences"):
        translate(m, "go !", src_vocab, tgt_vocab)


# ---------------------------------------------------------------- training


def test_tiny_model_overfits_a_tiny_set():
    src_vocab, tgt_vocab = vocabs()
    loader = make_loader(TranslationDataset(PAIRS, src_vocab, tgt_vocab), batch_size=8)
    m = model(src_v=len(src_vocab), tgt_v=len(tgt_vocab), hidden=32)
    history = train(m, loader, epochs=120, lr=0.01, valid_loader=loader, quiet=True)
    assert history.train_loss[-1] < 0.05 < history.train_loss[0]
    columns = "train_loss valid_loss tokens_per_sec seconds".split()
    assert list(history.frame().columns) == columns
    result = evaluate_bleu(m, PAIRS + [("go !", "allez !")], src_vocab, tgt_vocab)
    assert result.bleu > 90 and len(result.sources) == len(PAIRS)
    assert result.references[1] == ["va !", "allez !"]  # all references of one source


def test_training_stops_clearly_on_nan_and_reports_each_epoch(capsys):
    src_vocab, tgt_vocab = vocabs()
    loader = make_loader(TranslationDataset(PAIRS, src_vocab, tgt_vocab), batch_size=4)
    m = model(src_v=len(src_vocab), tgt_v=len(tgt_vocab))
    train(m, loader, epochs=2, valid_loader=loader, title="toy")
    # a bar for each epoch, under the title given
    drawn = last_drawings(capsys.readouterr().err)
    assert len(drawn) == 2 and all(line.startswith("toy") for line in drawn)
    train(m, loader, epochs=1, quiet=True)
    assert capsys.readouterr().err == ""
    with torch.no_grad():
        m.decoder.dense.bias.fill_(float("nan"))
    with pytest.raises(TrainingDiverged, match="epoch 1, step 1"):  # where it happened
        train(m, loader, epochs=2, quiet=True)


# ---------------------------------------------------------------- evaluation mode and
# devices


@pytest.mark.parametrize("training", [True, False])
def test_evaluation_and_decoding_leave_the_model_in_the_mode_they_found(training):
    src_vocab, tgt_vocab = vocabs()
    loader = make_loader(TranslationDataset(PAIRS, src_vocab, tgt_vocab), batch_size=4)
    m = model(src_v=len(src_vocab), tgt_v=len(tgt_vocab)).train(training)
    src, src_len = torch.tensor([[4, 5, 2]]), torch.tensor([3])
    greedy_decode(m, src, src_len, bos_id=1, eos_id=2, max_len=4)
    assert m.training is training and all(x.training is training for x in m.modules())
    translate(m, ["i am here ."], src_vocab, tgt_vocab, max_len=4)
    evaluate_loss(m, loader)
    assert m.training is training and all(x.training is training for x in m.modules())
    with eval_mode(m):
        assert not m.training
    assert m.training is training


def test_model_device_is_where_the_parameters_are():
    assert model_device(nn.Linear(2, 2)) == torch.device("cpu")
    assert model_device(nn.Linear(2, 2, device="meta")) == torch.device("meta")
    assert model_device(nn.ReLU()) == torch.device("cpu")  # no parameters: the CPU
