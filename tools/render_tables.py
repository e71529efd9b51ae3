#!/usr/bin/env python3
"""Render the tables of the README, the teacher's guide and the book's record pages from what was measured.

    python tools/render_tables.py           # rewrite the tables between their markers
    python tools/render_tables.py --check   # exit 1, naming each file whose tables differ from the records

Two sources, and no figure typed by hand:
- the committed notebooks: each chapter's title, its one line (the "**In this chapter:**" paragraph under
  the title), its wall time (first cell's start to last cell's end, as Jupyter recorded it), the headline
  figures and tables it computed (`nmt_lib.base.course.headline` and `record_table`, stored in its metadata by
  `tools/run_course.py`), and the day and CPU it ran on;
- the records of runs outside the notebooks (`nmt_lib.run.records`): `records/*.json` (published runs,
  ablations, `make soak`) and `bench/results/latest.json` (`make bench`), each with its day and CPU.
"""
import argparse
import json
import re
import sys
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLES = {"README.md": ("chapter-table", "tatoeba-results", "tatoeba-limits", "recipe-tatoeba", "modern-switches", "modern-tatoeba",
                        "results-table"),
          "book/teachers.md": ("module-plan", "chapter-times", "solution-times"),
          "book/results.md": ("learner-results", "tatoeba-public", "recipe-tatoeba", "modern-tatoeba", "published-subwords", "published-words", "ablation-subwords",
                              "chapter-figures"),
          "book/benchmarks.md": ("benchmark",),
          "book/command-line.md": ("soak",)}
RESULTS = ("08_evaluation", "held-out results")       # the notebook and the name of its results table
PUBLISHED = ("published-subwords", "published-words")  # records/NAME.json, best first
LEAD = "**In this chapter:**"
PUBLIC = ("tatoeba-test-greedy", "tatoeba-test-beam4")   # records/NAME.json of the published model
TARGET = "NLLB-200 distilled 600M"                     # issue 35's target on the public Tatoeba test




def when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def chapter(path: Path) -> dict:
    """What a row shows of one executed notebook."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    lines = [line for c in nb["cells"] if c["cell_type"] == "markdown" for line in "".join(c["source"]).splitlines()]
    title = next((line[2:].strip() for line in lines if line.startswith("# ")), path.stem)
    lead = next((line[len(LEAD):].strip() for line in lines if line.startswith(LEAD)), None)
    stamps = [c.get("metadata", {}).get("execution", {}) for c in nb["cells"] if c["cell_type"] == "code"]
    busy = [s["iopub.status.busy"] for s in stamps if "iopub.status.busy" in s]
    idle = [s["iopub.status.idle"] for s in stamps if "iopub.status.idle" in s]
    wall = (when(max(idle)) - when(min(busy))).total_seconds() if busy and idle else None
    meta = nb.get("metadata", {}).get("nmt_course", {})
    return {"path": path, "title": title, "lead": lead, "wall": wall, "headlines": meta.get("headlines", []),
            "executed": meta.get("executed"), "cpu": meta.get("cpu"), "mode": meta.get("mode")}


def record(root: Path, name: str) -> dict:
    path = root / name
    if not path.exists():
        raise SystemExit(f"render_tables: {name} is missing; the command that measures it writes it")
    return json.loads(path.read_text(encoding="utf-8"))


def figure(value) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"


def score(x: float) -> str:
    """A score to one decimal, halves rounded up, as a reader rounds the two-decimal figure a run printed."""
    return str(Decimal(str(x)).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def duration(seconds) -> str:
    if seconds is None:
        return "not executed"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def percent(x) -> str:
    return f"{100 * x:.1f}%"


def ran_on(ch: dict) -> str:
    return f"{ch['executed']}, {ch['cpu']}" if ch["executed"] else "not recorded"


def machine(rec: dict) -> str:
    m = rec.get("machine") or {}
    return f"{str(rec.get('recorded', 'not recorded'))[:10]}, {m.get('gpu') or m.get('cpu') or 'not recorded'}"


def markdown(text: str) -> str:
    """A token such as <unk> in code style, so that Markdown does not take it for an HTML tag."""
    return re.sub(r"(?<!`)<(\w+)>(?!`)", r"`<\1>`", str(text))


def table(header: list[str], rows: list, align: str = "") -> str:
    """A Markdown table; `align` holds one letter per column, r for right-aligned (the rest left)."""
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align.ljust(len(header), "l")) + "|"
    line = lambda cells: "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"   # \| stays in its cell
    return "\n".join([line(header), rule, *map(line, rows)])


def headlines(ch: dict, key_only: bool = False) -> str:
    """A chapter's headline figures, as `name: value; ...` (its key ones only, if asked and it marked any)."""
    shown = [h for h in ch["headlines"] if "value" in h]
    if key_only and any(h.get("key") for h in shown):
        shown = [h for h in shown if h.get("key")]
    return markdown("; ".join(f"{h['name']}: {figure(h['value'])}" for h in shown))


def recorded_table(ch: dict, name: str) -> dict:
    found = next((h for h in ch["headlines"] if h.get("name") == name and "rows" in h), None)
    if found is None:
        raise SystemExit(f"render_tables: {ch['path'].name} recorded no table {name!r}; execute it with run_course")
    return found


def readme_table(chapters: list[dict]) -> str:
    for ch in chapters:
        if ch["lead"] is None:
            raise SystemExit(f"render_tables: {ch['path'].name} has no '{LEAD} ...' line under its title")
    rows = [[f"[{ch['title']}](notebooks/{ch['path'].name})", markdown(ch["lead"]), duration(ch["wall"]),
             headlines(ch, key_only=True)] for ch in chapters]
    where = sorted({ran_on(ch) for ch in chapters})
    return (table(["chapter", "what you learn", "time", "headline figures"], rows, "llr")
            + f"\n\n*Learner mode, executed {'; '.join(where)}.*")


def figures_table(chapters: list[dict]) -> str:
    rows = [[f"[{ch['title']}]({ch['path'].name})", duration(ch["wall"]), headlines(ch), ran_on(ch)]
            for ch in chapters]
    return table(["chapter", "time (learner mode)", "headline figures", "executed on"], rows, "lr")


def guide_table(chapters: list[dict], heading: str = "chapter") -> str:
    rows = [[ch["title"], duration(ch["wall"]), ran_on(ch)] for ch in chapters]
    return table([heading, "time (learner mode)", "executed on"], rows, "lr")


def module_plan(chapters: list[dict], plan: dict) -> str:
    """The teacher's guide's plan: each session's chapters with their time to run; the rest is the plan's."""
    by_number = {ch["path"].stem.split("_")[0]: ch for ch in chapters}
    rows = []
    for i, s in enumerate(plan["sessions"], 1):
        missing = [n for n in s["chapters"] if n not in by_number]
        if missing:
            raise SystemExit(f"render_tables: book/module_plan.json names chapters {missing} that have no notebook")
        walls = [by_number[n]["wall"] for n in s["chapters"]]
        rows.append([s["week"], i, ", ".join(by_number[n]["title"].split(". ")[0] for n in s["chapters"]),
                     s["outcomes"], duration(sum(walls)) if None not in walls else "not executed",
                     f"{s['study_h']:g} h", s["demo"], s["homework"], s["due"] or "-"])
    return table(["week", "session", "chapters", "outcomes", "time to run", "planned study", "in class",
                  "homework", "due"], rows, "rrllrr")


def results_table(ch: dict) -> str:
    t = recorded_table(ch, RESULTS[1])
    return (table(["model", *t["columns"]], [[label, *map(figure, v)] for label, *v in t["rows"]],
                  "l" + "r" * len(t["columns"])) + f"\n\n*Chapter 8, learner mode, executed {ran_on(ch)}.*")


def headline_results(ch: dict, root: Path) -> str:
    """The published runs (full split, sacreBLEU) and chapter 8's learner-mode models, each from its record."""
    rows = []
    for name in PUBLISHED:
        rec = record(root, f"records/{name}.json")
        rows += [[f"[{rec['label']}, {ev['search']}](book/results.md)",
                  f"full test split ({rec['sentences']:,} sentences), sacreBLEU", score(ev["sacrebleu"]),
                  f"{rec['parameters']:,}", duration(rec["training_minutes"] * 60), machine(rec)]
                 for ev in rec["evaluations"]]
    t = recorded_table(ch, RESULTS[1])
    col = {c: i for i, c in enumerate(t["columns"], start=1)}
    rows += [[f"[Chapter 8: {r[0]}](notebooks/{ch['path'].name})", "chapter 8's short sentences, token BLEU",
              score(r[col["test BLEU"]]), f"{r[col['parameters']]:,}", duration(r[col["training time (s)"]]),
              ran_on(ch)] for r in t["rows"]]
    return table(["model", "test set, metric", "BLEU", "parameters", "trained for", "recorded"], rows, "llrrr")


def published(rec: dict) -> str:
    """A published run: its commands, then what it is, how it trained, and its scores with their signatures."""
    losses = ", ".join("–" if v is None else f"{v:g}" for v in rec["valid_loss"])
    rows = [["data", rec["data"]], ["model", f"{rec['model']}: **{rec['parameters']:,} parameters**"],
            ["training", f"{rec['updates']:,} updates ({rec['epochs']:g} epochs); {rec['training']}"],
            [f"validation loss after each epoch ({rec['valid_loss_unit']})", losses],
            ["wall time", f"**{duration(rec['training_minutes'] * 60)}** of training ({rec['wall_time_note']})"],
            ["peak memory", f"{rec['peak_memory_gb']:g} GB"],
            ["test sentences, references", f"{rec['sentences']:,} distinct English sentences, {rec['references']:,}"]]
    for ev in rec["evaluations"]:
        rows.append([f"held-out test, {ev['search']}", f"**{score(ev['sacrebleu'])}** sacreBLEU ({ev['sacrebleu']:.2f})"
                     + (f", chrF **{score(ev['chrf'])}**" if ev.get("chrf") is not None else "")
                     + (f"; {ev['unknown']:,} `<unk>` in the output" if ev.get("unknown") is not None else "")
                     + f"; evaluating took {ev['seconds']:,} s"])
    rows += [["sacreBLEU signature", f"`{rec['signature']}`"]]
    rows += [["chrF signature", f"`{rec['chrf_signature']}`"]] if rec.get("chrf_signature") else []
    lines = ["```bash", *rec["commands"], "```", "", table(["", ""], [[k, markdown(v)] for k, v in rows])]
    if rec.get("other_runs"):
        cols = [k for k in rec["other_runs"][0] if k != "run"]
        lines += ["", table(["run", *cols], [[r["run"], *(figure(r.get(c, "")) for c in cols)]
                                           for r in rec["other_runs"]], "l" + "r" * len(cols))]
    return "\n".join(lines) + f"\n\n*Run on {machine(rec)}; transcribed {rec['transcribed']}.*"


def ablation(rec: dict) -> str:
    return (f"Method: {rec['method']}\n\n" + table(rec["columns"], [[markdown(v) for v in r] for r in rec["rows"]],
                                                   "lrr") + f"\n\n*`{rec['command']}`, run on {machine(rec)}; "
            f"transcribed {rec['transcribed']}.*")


def training_minutes(rec: dict) -> float:
    """An evaluation record's training time in minutes: its sessions' sum, where the run kept them."""
    sessions = rec["training"].get("sessions") or []
    return sum(s["seconds"] for s in sessions) / 60 if sessions else rec["training"]["seconds"] / 60


def public_results(ours: list[dict], others: dict, card: str | None = None) -> str:
    """Our published model on the public Tatoeba test beside the scores others published, then the test's
    facts: its size, the signatures, and the overlap with our corpus that was left out of training."""
    rows = []
    for rec in ours:
        search = "greedy" if rec["beam"] == 1 else f"beam {rec['beam']}" + (
            f", length penalty {rec['alpha']:g}" if rec.get("alpha", 1.0) != 1.0 else "")
        rows.append([f"**{f'[ours]({card})' if card else 'ours'}, {search}**", f"{rec['model']['parameters']:,}",
                     "Tatoeba's own English–French pairs, the test's sentences left out",
                     f"**{score(rec['sacrebleu'])}**", f"**{score(rec['chrf'])}**"])
    rows += [[r["system"] + (f" ({r['model']})" if r.get("model") else ""), r["parameters"], r["data"],
              f"{r['sacrebleu']:.1f}", "–" if r["chrf"] is None else f"{r['chrf']:.1f}"] for r in others["rows"]]
    first, ex = ours[0], ours[0]["data"]["excluded"]
    facts = [["test set, one reference each", f"`{first['split']}`, {first['sentences']:,} pairs"],
             ["our scores", f"`evaluate --test tatoeba` on {machine(first)}, after "
                            f"{duration(training_minutes(first) * 60)} of training"],
             ["sacreBLEU signature", f"`{first['signature']}`"], ["chrF signature", f"`{first['chrf_signature']}`"],
             ["test pairs sharing a sentence with our corpus: as written, Unicode and spaces unified",
              f"{ex['test_pairs_in_corpus_exactly']:,} and {ex['test_pairs_in_corpus']:,} of {ex['test_pairs']:,}"],
             ["our training and validation pairs left out for sharing one", f"{ex['train']:,} and {ex['valid']:,}"],
             ["the others' scores", f"transcribed {others['transcribed']}"]]
    return (table(["system", "parameters", "trained on", "BLEU", "chrF"], rows, "lrlrr") + "\n\n"
            + table(["", ""], facts))


def limits(rec: dict, ours: list[dict], others: dict) -> str:
    """The published model beside the target (issue 35: NLLB-200 distilled 600M's score), its size and training
    time, and what the public test asks that the training split cannot teach (the recipe search's count)."""
    best = max(ours, key=lambda r: r["sacrebleu"])
    target = next(r for r in others["rows"] if r["system"] == TARGET)
    lim = rec["limits"]
    share = lambda n: f"{n:,} of {lim['test_pairs']:,} ({100 * n / lim['test_pairs']:.0f}%)"
    rows = [("our best BLEU on the public test", score(best["sacrebleu"])),
            (f"the target: {TARGET}'s BLEU", f"{target['sacrebleu']:.1f}"),
            ("our parameters", f"{best['model']['parameters'] / 1e6:.1f} M"),
            ("our training time", duration(training_minutes(best) * 60)),
            ("our training pairs", f"{lim['training_pairs']:,}"),
            ("test sentences with an English word no training sentence holds", share(lim["unseen_english_word"])),
            ("test references with a French word no training translation holds", share(lim["unseen_french_word"])),
            ("test lines that repeat an English sentence with another reference", share(lim["repeated_english"]))]
    return table(["", ""], rows, "lr")


def recipe(rec: dict) -> str:
    """The recipe search (`experiments/recipe_search.py`): each candidate's validation scores."""
    rows = []
    for r in rec["rows"]:
        mark = (lambda x: f"**{x}**") if (r["candidate"], r["search"]) == (rec["chosen"]["candidate"],
                                                                          rec["chosen"]["search"]) else str
        rows.append([mark(r["candidate"]), r["model"], f"{r['updates']:,}", duration(r["training_minutes"] * 60),
                     r["search"], mark(score(r["valid_bleu"])), score(r["valid_chrf"])])
    return (f"Method: {rec['method']} ({rec['sentences']:,} sentences, {rec['references']:,} references; "
            f"`{rec['signature']}`).\n\n" + table(["candidate", "model", "updates", "training", "search",
                                                    "valid BLEU", "valid chrF"], rows, "llrrlrr")
            + f"\n\n*`{rec['command']}`, run on {machine(rec)}.*")


def modern(rec: dict) -> str:
    """The 2017 blocks and today's at full scale (`experiments/modern_compare.py`)."""
    rows = [[r["candidate"], r["switches"], f"{r['parameters']:,}", f"{r['updates']:,}",
             duration(r["training_minutes"] * 60),
             f"{r['target_tokens_per_second']:,}" if r["target_tokens_per_second"] else "not recorded",
             f"{r['valid_perplexity']:.2f}", *(score(r[k]) for k in ("valid_bleu", "valid_chrf", "test_bleu",
                                                                     "test_chrf"))] for r in rec["rows"]]
    header = ["run", "model", "parameters", "updates", "training", "target tokens/s", "valid perplexity",
              "valid BLEU", "valid chrF", "test BLEU", "test chrF"]
    return (f"Method: {rec['method']}.\n\n" + table(header, rows, "llrrrrrrrrr")
            + f"\n\n*Trained on {'; '.join(sorted({r['machine'] for r in rec['rows']}))}; `{rec['command']}`, "
            f"scored on {machine(rec)}.*")


def switches_table(ch: dict) -> str:
    """Chapter 12's measurement at small scale, the table its notebook recorded."""
    t = recorded_table(ch, "modern-switches")
    keep = ["valid BLEU", "valid perplexity", "target tokens/s", "KV cache, bytes/token", "parameters"]
    show = lambda k, v: (f"{v:,.2f}" if isinstance(v, float) and k.startswith("valid") else
                         f"{v:,.0f}" if isinstance(v, (int, float)) else str(v))
    rows = [[row[0], *(show(k, row[1 + t["columns"].index(k)]) for k in keep)] for row in t["rows"]]
    return table(["model", *keep], rows, "lrrrrr") + f"\n\n*From [chapter 12](notebooks/12_modern.ipynb), {ran_on(ch)}.*"


def benchmark(rec: dict) -> str:
    """`make bench`'s last figures (bench/results/latest.json), with its targets."""
    t, d, b16 = rec["training"], rec["decoding"], rec["training"].get("bf16", {"measured": False})
    rounds = lambda other: "single rounds {:.2f}–{:.2f}×".format(*(f(a / b for a, b in zip(
        t["course"]["tokens_per_sec_rounds"], t[other]["tokens_per_sec_rounds"])) for f in (min, max)))
    speed = lambda k: f"{t[k]['tokens_per_sec_median']:,.0f}"
    rows = [["training speed, course / d2l-style baseline", f"**{t['ratio_train_vs_d2l']:.2f}×** ({speed('course')} "
             f"vs {speed('d2l')} target tokens/s; {rounds('d2l')})", "≥ 3.5×"],
            ["training speed, course / `torch.nn.Transformer`, identical batches",
             f"**{t['ratio_train_vs_nn_transformer']:.2f}×** ({speed('torch')} tokens/s for `nn.Transformer`; "
             f"{rounds('torch')})", "≥ 1.1×"],
            [f"model FLOP utilisation (6 × non-embedding parameters × tokens/s ÷ the matmul peak measured in the same "
             f"run, {t['peak_matmul_gflops']:.0f} GFLOP/s)", f"**{percent(t['course']['mfu'])}** (d2l-style "
             f"{percent(t['d2l']['mfu'])}, `nn.Transformer` {percent(t['torch']['mfu'])})", "≥ 40%"],
            ["target positions that are padding: length-bucketed, d2l's `num_steps=20`",
             f"{percent(t['padding']['course_bucketed'])}, {percent(t['padding']['d2l_num_steps_20'])}", ""]]
    if b16["measured"]:
        rows += [["bf16 (autocast), course bf16 / course fp32", f"**{b16['ratio_course_bf16_vs_fp32']:.2f}×** "
                  f"(bf16 matmul peak {b16['peak_matmul_gflops']:.0f} GFLOP/s)", ""],
                 ["bf16: course bf16 / d2l-style (fp32)", f"**{b16['ratio_course_bf16_vs_d2l']:.2f}×**", "≥ 7×"],
                 ["bf16: course / `nn.Transformer`, both bf16", f"**{b16['ratio_course_vs_nn_transformer_bf16']:.2f}×**",
                  "≥ 1.2×"], ["bf16: MFU of the bf16 peak", f"**{percent(b16['mfu_course_bf16'])}**", "≥ 40%"]]
    rows += [[f"decoding {d['sentences']} held-out sentences, sentences/s: batched greedy with KV cache / beam 4 / "
              "one at a time without cache", " / ".join(f"{d[k]['sentences_per_sec_median']:,.1f}" for k in (
                  "batched_greedy", "beam4", "one_at_a_time")), ""],
             ["decoding, batched greedy / one at a time", f"**{d['ratio_decode_batched_vs_one_at_a_time']:.1f}×**",
              "≥ 30×"],
             ["the same, against one at a time with the output layer on the newest position only",
              f"{d['ratio_decode_batched_vs_one_at_a_time_last_position']:.1f}×", "context"],
             ["peak memory of `translate` over the same sentences: beam 4 / beam 64",
              " / ".join(f"{d['peak_memory_mb'][k]:,.0f} MB" for k in ("beam4", "beam64")), "within `--memory-budget`"]]
    return (table(["figure", "measured", "target"], rows) + f"\n\n*`{rec['command']}`, {duration(rec['bench_seconds'])}"
            f": {t['rounds']} rounds × {t['batches_per_round']} batches per contender, {rec['threads']} threads; "
            f"decoding with {d['model']}; recorded {machine(rec)}, torch {rec['machine']['torch']}.*")


def soak(rec: dict) -> str:
    k, i = rec["sigkill"], rec["sigint"]
    rows = [["SIGKILLs", f"{k['kills']:,}"], ["of them during a checkpoint write", f"{k['during_writes']:,}"],
            ["kills that found a checkpoint: it loaded and `--resume` finished", f"{k['loaded']:,}"],
            ["SIGINTs, over runs", f"{i['interrupts']:,}, over {i['runs']:,}"],
            ["runs that got to the end, every one with the uninterrupted run's weights", f"{i['finished']:,}"]]
    return table(["", ""], rows, "lr") + f"\n\n*`{rec['command']}` on {machine(rec)}.*"


def rendered(text: str, marker: str, content: str, name: str) -> str:
    """`text` with the block between `<!-- marker:start -->` and `<!-- marker:end -->` replaced by `content`."""
    pattern = re.compile(rf"(<!-- {marker}:start -->\n)(?:.*?\n)?(<!-- {marker}:end -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"render_tables: {name} has no <!-- {marker}:start --> ... <!-- {marker}:end --> block")
    return pattern.sub(lambda m: m.group(1) + content + "\n" + m.group(2), text)


def render(root: Path = ROOT) -> dict[str, tuple[str, str]]:
    """For each file with tables: (its text now, its text with the tables rendered from the notebooks)."""
    chapters = [chapter(p) for p in sorted((root / "notebooks").glob("*.ipynb"))]
    solutions = [chapter(p) for p in [*sorted((root / "solutions").glob("*.ipynb")),
                                      *sorted((root / "solutions" / "assignments").glob("*.ipynb"))]]
    by_stem = lambda stem: next(c for c in chapters if c["path"].stem == stem)
    rec = lambda name: record(root, f"records/{name}.json")
    ours, others = lambda: [rec(n) for n in PUBLIC], lambda: rec("tatoeba-others")
    plan = lambda: json.loads((root / "book" / "module_plan.json").read_text(encoding="utf-8"))
    tables = {"chapter-table": lambda: readme_table(chapters), "chapter-times": lambda: guide_table(chapters),
              "module-plan": lambda: module_plan(chapters, plan()),
              "solution-times": lambda: guide_table(solutions, "solutions notebook"),
              "results-table": lambda: headline_results(by_stem(RESULTS[0]), root),
              "learner-results": lambda: results_table(by_stem(RESULTS[0])),
              "chapter-figures": lambda: figures_table(chapters),
              "ablation-subwords": lambda: ablation(rec("ablation-subwords")),
              "benchmark": lambda: benchmark(record(root, "bench/results/latest.json")),
              "soak": lambda: soak(rec("soak")),
              "tatoeba-results": lambda: public_results(ours(), others(), card="models/tatoeba-en-fr/README.md"),
              "tatoeba-public": lambda: public_results(ours(), others()),
              "recipe-tatoeba": lambda: recipe(rec("recipe-tatoeba")), "modern-tatoeba": lambda: modern(rec("modern-tatoeba")),
              "modern-switches": lambda: switches_table(by_stem("12_modern")),
              "tatoeba-limits": lambda: limits(rec("recipe-tatoeba"), ours(), others()),
              **{name: (lambda n=name: published(rec(n))) for name in PUBLISHED}}
    out = {}
    for name, markers in TABLES.items():
        text = new = (root / name).read_text(encoding="utf-8")
        for marker in markers:
            new = rendered(new, marker, tables[marker](), name)
        out[name] = (text, new)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is out of date")
    args = parser.parse_args(argv)
    pages = render()
    stale = [name for name, (now, new) in pages.items() if now != new]
    if args.check and stale:
        print(f"render_tables: out of date with the notebooks and records: {', '.join(stale)}; run "
              "python tools/render_tables.py")
        return 1
    for name in stale:
        (ROOT / name).write_text(pages[name][1], encoding="utf-8")
    print(("rewrote " + ", ".join(stale)) if stale else "tables match the notebooks and the records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
