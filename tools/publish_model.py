#!/usr/bin/env python3
"""Publish a trained checkpoint as the course's model: `models/tatoeba-en-fr/` with its weights (safetensors,
half precision), settings, a model card written from the checkpoint and its evaluation records, and the
translations of a few fixed sentences, which `tests/test_published.py` compares the model with from then on.

    python tools/publish_model.py runs/tatoeba-avg.pt records/tatoeba-test-greedy.json \\
        records/tatoeba-test-beam4.json

The records are what `python -m nmt_lib evaluate --record` wrote for this checkpoint.
"""
import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nmt_lib.run.checkpoint import load_checkpoint  # noqa: E402
from nmt_lib.run.cli import FAST  # noqa: E402
from nmt_lib.run.corpus import CorpusSettings, keeps_case  # noqa: E402
from nmt_lib.run.inference import translate_lines  # noqa: E402
from nmt_lib.run.options import option  # noqa: E402
from nmt_lib.run.published import MODELS, PUBLISHED, export_model, load_published  # noqa: E402
from nmt_lib.run.trainer import RunSettings  # noqa: E402
from nmt_lib.transformer import TransformerConfig  # noqa: E402

LIMIT_MB = 25                        # the most the course ships in models/
EXAMPLES = ["I am cold.", "I don't know what to do.", "Where is the station?", "Tom has lived in Boston for "
            "three years.", "She asked him to help her with her homework.", "Could you recommend a good "
            "restaurant near here?", "The children were playing in the garden when it started to rain."]
PER_SESSION = ("time_limit", "max_steps", "path")   # the last session's only, or this machine's


def train_command(payload: dict) -> str:
    """The `train` command that makes this run: every option whose value differs from the tools' default."""
    parts = ["python -m nmt_lib train"]
    for cls, values in ((CorpusSettings, payload["data"]), (TransformerConfig, payload["config"]),
                        (RunSettings, payload["train"])):
        for f in fields(cls):
            if "help" not in f.metadata or f.name in PER_SESSION or f.name not in values:
                continue
            default, value, flag = FAST.get(f.name, f.default), values[f.name], option(f)[0][0]
            if value != default:
                parts.append(flag if value is True else f"--no-{flag[2:]}" if value is False else f"{flag} {value}")
    return " \\\n    ".join(parts + ["--out runs/tatoeba.pt"])


def card(ckpt, records: list[dict], name: str) -> str:
    """The model card: what the model is, its data and licence, how it was trained, and its scores."""
    cfg, data, payload = ckpt.model.cfg, ckpt.payload["data"], ckpt.payload
    progress = payload.get("progress") or {}
    params = sum(p.numel() for p in ckpt.model.parameters())
    excluded = data.get("excluded") or {}
    sessions = progress.get("sessions") or []
    minutes = sum(s["seconds"] for s in sessions) / 60 if sessions else progress.get("seconds", 0) / 60
    lines = [
        f"# {name}: the course's English→French Transformer", "",
        f"A Transformer encoder–decoder ({'pre' if cfg.norm_first else 'post'}-norm, d_model {cfg.d_model}, "
        f"{cfg.n_heads} heads, d_ff {cfg.d_ff}, {cfg.n_layers} + {cfg.n_layers} layers"
        f"{', embeddings and output layer tied' if cfg.tie_embeddings else ''}) of **{params:,} parameters**, "
        "trained from scratch. It translates English into French"
        + (", keeping case and punctuation. " if keeps_case(data) else ", in lowercase with punctuation split off. ")
        + "The weights are stored in half precision (`model.safetensors`); loading them runs no code.", "",
        "```python", "from nmt_lib.run import load_published", "model = load_published()          # this folder",
        "```", "", "```bash", 'echo "I am cold." | python -m nmt_lib translate --model published', "```", "",
        "## Data and licence", "",
        f"Trained on the Tatoeba English–French pairs as the course downloads them (`fra.txt`, SHA-1 "
        f"`{data.get('sha1')}`, from manythings.org/anki), sentences by the contributors of tatoeba.org under "
        "CC-BY 2.0 FR. This model is derived from them: credit the Tatoeba contributors when you use it.", "",
        f"- Split: the course's split by English sentence, {data['valid_frac']:.0%} validation and "
        f"{data['test_frac']:.0%} test, seed {data['seed']}.",
    ]
    if data.get("tokenizer") == "bpe":
        lines.append(f"- Tokenizer: SentencePiece BPE, {len(ckpt.tgt_vocab):,} pieces "
                     f"{'for both languages' if data.get('shared_vocab') else 'per language'}, learned on the "
                     f"training split{' as written' if keeps_case(data) else ''}, with byte fallback (no `<unk>`).")
    if excluded:
        lines.append(f"- Kept apart from the public Tatoeba test set (v2021-08-07): "
                     f"{excluded['test_pairs_in_corpus_exactly']:,} of its {excluded['test_pairs']:,} pairs share "
                     f"their English or French sentence with `fra.txt` ({excluded['test_pairs_in_corpus']:,} once "
                     "Unicode forms and spaces are unified), so every corpus pair sharing a sentence with it was "
                     f"left out: {excluded['train']:,} from training and {excluded['valid']:,} from validation.")
    lines += ["", "## Training", "", "```bash", train_command(payload), "```", "",
              "`--epochs` is an upper bound: each session trained under `--time-limit MINUTES` (the later "
              "ones with `--resume` added), and the run was stopped after the updates below.", "",
              f"{progress.get('step', 0):,} updates ({progress.get('epoch', 1) - 1} epochs), "
              f"{minutes:.1f} minutes of training in all" + (":" if sessions else "."), ""]
    for s in sessions:
        lines.append(f"- updates {s['from_update']:,} to {s['to_update']:,}: {s['seconds'] / 60:.1f} min on "
                     f"{s['machine'] or 'a machine not recorded'}")
    if payload.get("averaged"):
        lines += ["", f"The published weights are the mean of {len(payload['averaged'])} checkpoints, the "
                  "epoch ends the run kept (`--keep-last`), at updates "
                  f"{', '.join(f'{u:,}' for u in payload['averaged'])}: `python -m nmt_lib average --out "
                  "runs/tatoeba.avg.pt runs/tatoeba.epochE.pt ...`, one file per epoch end."]
    lines += ["", "## Scores", "", "| test set | search | BLEU | chrF | BLEU signature | recorded on |",
              "|---|---|---:|---:|---|---|"]
    for r in records:
        search = "greedy" if r["beam"] == 1 else f"beam {r['beam']}" + (
            f", length penalty {r['alpha']:g}" if r.get("alpha", 1.0) != 1.0 else "")
        lines.append(f"| {r['split']} ({r['sentences']:,} sentences) | {search} | {r['sacrebleu']:.1f} | "
                     f"{r['chrf']:.1f} | `{r['signature']}` | {r['recorded'][:10]}, {r['machine']['cpu']} |")
    if excluded:
        lines += ["", "It is trained in-domain, on Tatoeba itself (with the test set's sentences left out); the "
                  "systems the course's README compares it with are trained on other, far larger data."]
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("records", nargs="+", help="evaluate --record files of this checkpoint")
    parser.add_argument("--out", default=str(MODELS / PUBLISHED))
    args = parser.parse_args(argv)
    ckpt = load_checkpoint(args.checkpoint, device="cpu")
    records = [json.loads(Path(p).read_text(encoding="utf-8")) for p in args.records]
    params = sum(p.numel() for p in ckpt.model.parameters())
    wrong = [p for p, r in zip(args.records, records) if r["model"]["parameters"] != params
             or r["training"]["updates"] != ckpt.step or r["training"].get("averaged") != ckpt.payload.get("averaged")]
    if wrong:
        parser.error(f"{', '.join(wrong)} did not score this checkpoint (other parameters, updates or average)")
    folder = export_model(ckpt, args.out, card=card(ckpt, records, Path(args.out).name))
    pub = load_published(folder, device="cpu")
    examples = {"search": "greedy", "sentences": EXAMPLES, "translations": translate_lines(pub, EXAMPLES)}
    (folder / "examples.json").write_text(json.dumps(examples, indent=1, ensure_ascii=False) + "\n",
                                          encoding="utf-8")
    size = sum(p.stat().st_size for p in folder.iterdir()) / 2 ** 20
    print(f"published {folder}: {size:.1f} MB" + (f", over the {LIMIT_MB} MB the course ships" if size > LIMIT_MB
                                                  else ""))
    for s, t in zip(EXAMPLES, examples["translations"]):
        print(f"  {s}  ->  {t}")
    return 1 if size > LIMIT_MB else 0


if __name__ == "__main__":
    sys.exit(main())
