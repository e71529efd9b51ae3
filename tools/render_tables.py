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


def duration(seconds) -> str:
    if seconds is None:
        return "not executed"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def ran_on(ch: dict) -> str:
    return f"{ch['executed']}, {ch['cpu']}" if ch["executed"] else "not recorded"


def markdown(text: str) -> str:
    """A token such as <unk> in code style, so that Markdown does not take it for an HTML tag."""
    return re.sub(r"(?<!`)<(\w+)>(?!`)", r"`<\1>`", text)


def headlines(ch: dict, key_only: bool = False) -> str:
    """A chapter's headline figures, as `name: value; ...` (its key ones only, if asked and it marked any)."""
    shown = [h for h in ch["headlines"] if "value" in h]
    if key_only and any(h.get("key") for h in shown):
        shown = [h for h in shown if h.get("key")]
    return markdown("; ".join(f"{h['name']}: {figure(h['value'])}" for h in shown))


def where_run(chapters: list[dict]) -> str:
    """One line for all the chapters' day and CPU when they share them, else a line per group."""
    groups: dict[str, list[str]] = {}
    for ch in chapters:
        groups.setdefault(ran_on(ch), []).append(ch["title"].split(".")[0])
    if len(groups) == 1:
        return f"*Learner mode, executed {next(iter(groups))}.*"
    return "*Learner mode, executed " + "; ".join(
        f"{where} (chapter{'s' if len(names) > 1 else ''} {', '.join(names)})" for where, names in groups.items()) + ".*"


def readme_table(chapters: list[dict]) -> str:
    rows = ["| chapter | what you learn | time | headline figures |", "|---|---|---:|---|"]
    for ch in chapters:
        if ch["lead"] is None:
            raise SystemExit(f"render_tables: {ch['path'].name} has no '{LEAD} ...' line under its title")
        rows.append(f"| [{ch['title']}](notebooks/{ch['path'].name}) | {markdown(ch['lead'])} | "
                    f"{duration(ch['wall'])} | {headlines(ch, key_only=True)} |")
    return "\n".join(rows) + "\n\n" + where_run(chapters)


def figures_table(chapters: list[dict]) -> str:
    """The book's Results page: every headline figure of every chapter, with where it ran."""
    rows = ["| chapter | time (learner mode) | headline figures | executed on |", "|---|---:|---|---|"]
    for ch in chapters:
        rows.append(f"| [{ch['title']}]({ch['path'].name}) | {duration(ch['wall'])} | {headlines(ch)} | "
                    f"{ran_on(ch)} |")
    return "\n".join(rows)


def guide_table(chapters: list[dict], heading: str = "chapter") -> str:
    rows = [f"| {heading} | time (learner mode) | executed on |", "|---|---:|---|"]
    rows += [f"| {ch['title']} | {duration(ch['wall'])} | {ran_on(ch)} |" for ch in chapters]
    return "\n".join(rows)


def learner_results(chapters: list[dict]) -> tuple[dict, dict]:
    stem, name = RESULTS
    ch = next(c for c in chapters if c["path"].stem == stem)
    table = next((h for h in ch["headlines"] if h.get("name") == name and "rows" in h), None)
    if table is None:
        raise SystemExit(f"render_tables: notebooks/{stem}.ipynb recorded no table {name!r}; run it with run_course")
    return ch, table


def results_table(chapters: list[dict]) -> str:
    """The table the results notebook recorded (`nmt_lib.base.course.record_table`), with where it ran."""
    ch, table = learner_results(chapters)
    lines = ["| model | " + " | ".join(table["columns"]) + " |", "|---|" + "---:|" * len(table["columns"])]
    lines += [f"| {label} | " + " | ".join(map(figure, values)) + " |" for label, *values in table["rows"]]
    return "\n".join(lines) + f"\n\n*Chapter 8, learner mode, executed {ran_on(ch)}.*"


def machine(rec: dict) -> str:
    m = rec.get("machine") or {}
    day = str(rec.get("recorded", "not recorded"))[:10]
    return f"{day}, {m.get('gpu') or m.get('cpu') or 'machine not recorded'}"


def score(x: float) -> str:
    """A score to one decimal, halves rounded up, as a reader rounds the two-decimal figure a run printed."""
    return str(Decimal(str(x)).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def headline_results(chapters: list[dict], root: Path) -> str:
    """The README's results: the published runs (full split, sacreBLEU) and chapter 8's learner-mode models
    (its short test sentences, the course's token BLEU), each from its record."""
    rows = ["| model | test set, metric | BLEU | parameters | trained for | recorded |",
            "|---|---|---:|---:|---:|---|"]
    for name in PUBLISHED:
        rec = record(root, f"records/{name}.json")
        for ev in rec["evaluations"]:
            rows.append(f"| [{rec['label']}, {ev['search']}](book/results.md) | full test split "
                        f"({rec['sentences']:,} sentences), sacreBLEU | {score(ev['sacrebleu'])} | "
                        f"{rec['parameters']:,} | {duration(rec['training_minutes'] * 60)} | {machine(rec)} |")
    ch, table = learner_results(chapters)
    col = {c: i for i, c in enumerate(table["columns"], start=1)}
    for row in table["rows"]:
        rows.append(f"| [Chapter 8: {row[0]}](notebooks/{ch['path'].name}) | chapter 8's short sentences, "
                    f"token BLEU | {score(row[col['test BLEU']])} | {row[col['parameters']]:,} | "
                    f"{duration(row[col['training time (s)']])} | {ran_on(ch)} |")
    return "\n".join(rows)


def published(rec: dict) -> str:
    """A published run's page section: its commands, what it is, how it trained, its scores and signatures."""
    losses = ", ".join("–" if v is None else f"{v:g}" for v in rec["valid_loss"])
    rows = [("data", rec["data"]), ("model", f"{rec['model']}: **{rec['parameters']:,} parameters**"),
            ("training", f"{rec['updates']:,} updates ({rec['epochs']:g} epochs); {rec['training']}; validation "
                         f"loss {rec['valid_loss_unit']} after each epoch: {losses}"),
            ("wall time", f"**{duration(rec['training_minutes'] * 60)}** of training, {rec['wall_time_note']}; "
                          f"peak memory {rec['peak_memory_gb']:g} GB; {machine(rec)}")]
    for ev in rec["evaluations"]:
        chrf = f", chrF **{score(ev['chrf'])}**" if ev.get("chrf") is not None else ""
        unk = f"; {ev['unknown']:,} `<unk>` in the output" if ev.get("unknown") is not None else ""
        rows.append((f"held-out test, {ev['search']}", f"**{score(ev['sacrebleu'])}** sacreBLEU "
                     f"({ev['sacrebleu']:.2f}){chrf}{unk}; evaluating took {ev['seconds']:,} s"))
    lines = ["```bash", *rec["commands"], "```", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {markdown(v)} |" for k, v in rows]
    lines += ["", f"On the {rec['sentences']:,} distinct English sentences of the test split, against all their "
              f"{rec['references']:,} references. sacreBLEU signature: `{rec['signature']}`"
              + (f"; chrF signature: `{rec['chrf_signature']}`." if rec.get("chrf_signature") else ".")]
    if rec.get("other_runs"):
        cols = [k for k in rec["other_runs"][0] if k != "run"]
        lines += ["", "| run | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
        lines += [f"| {r['run']} | " + " | ".join(figure(r.get(c, "")) for c in cols) + " |"
                  for r in rec["other_runs"]]
    return "\n".join(lines) + f"\n\n*Run on {machine(rec)}; transcribed {rec['transcribed']}.*"


def ablation(rec: dict) -> str:
    lines = [f"Method: {rec['method']}", "", "| " + " | ".join(rec["columns"]) + " |",
             "|---|" + "---:|" * 2 + "---|" * (len(rec["columns"]) - 3)]
    lines += ["| " + " | ".join(markdown(str(v)) for v in row) + " |" for row in rec["rows"]]
    return "\n".join(lines) + f"\n\n*`{rec['command']}`, run on {machine(rec)}; transcribed {rec['transcribed']}.*"


def training_minutes(rec: dict) -> float:
    """An evaluation record's training time in minutes: its sessions' sum, where the run kept them."""
    sessions = rec["training"].get("sessions") or []
    return sum(s["seconds"] for s in sessions) / 60 if sessions else rec["training"]["seconds"] / 60


def public_results(ours: list[dict], others: dict, card: str | None = None) -> str:
    """The README's comparison on the public Tatoeba test: our published model (its `evaluate --test
    tatoeba --record` records) beside the scores others published on the same set, with the overlap."""
    rows = ["| system | parameters | trained on | BLEU | chrF |", "|---|---:|---|---:|---:|"]
    for rec in ours:
        search = "greedy" if rec["beam"] == 1 else f"beam {rec['beam']}" + (
            f", length penalty {rec['alpha']:g}" if rec.get("alpha", 1.0) != 1.0 else "")
        name = f"[ours]({card})" if card else "ours"                  # the model card, where it can be linked
        rows.append(f"| **{name}, {search}** | {rec['model']['parameters']:,} | "
                    f"Tatoeba's own English–French pairs, the test's sentences left out | "
                    f"**{score(rec['sacrebleu'])}** | **{score(rec['chrf'])}** |")
    for r in others["rows"]:
        chrf = "–" if r["chrf"] is None else f"{r['chrf']:.1f}"
        model = f" ({r['model']})" if r.get("model") else ""
        rows.append(f"| {r['system']}{model} | {r['parameters']} | {r['data']} | {r['sacrebleu']:.1f} | {chrf} |")
    first, excluded = ours[0], ours[0]["data"]["excluded"]
    minutes = training_minutes(first)
    return "\n".join(rows) + (
        f"\n\nAll on the {first['sentences']:,} pairs of `{first['split']}`, one reference each; ours scored by "
        f"`evaluate --test tatoeba` with sacreBLEU `{first['signature']}` and chrF `{first['chrf_signature']}` "
        f"({first['recorded'][:10]}, {first['machine']['cpu']}; {minutes:.0f} min of training). "
        f"{excluded['test_pairs_in_corpus_exactly']:,} of the test's {excluded['test_pairs']:,} pairs share their "
        f"English or French sentence with the course's corpus ({excluded['test_pairs_in_corpus']:,} once Unicode "
        f"forms and spaces are unified), so its {excluded['train']:,} training and "
        f"{excluded['valid']:,} validation pairs that share one were left out before training. "
        f"The others' scores are transcribed {others['transcribed']}.")


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
    return "\n".join(["| | |", "|---|---:|", *(f"| {name} | {value} |" for name, value in rows)])


def recipe(rec: dict) -> str:
    """The recipe search (`experiments/recipe_search.py`): each candidate's validation scores."""
    lines = [f"Method: {rec['method']} ({rec['sentences']:,} sentences, {rec['references']:,} references; "
             f"`{rec['signature']}`).", "", "| candidate | model | updates | training | search | valid BLEU | "
             "valid chrF |", "|---|---|---:|---:|---|---:|---:|"]
    for r in rec["rows"]:
        chosen = r["candidate"] == rec["chosen"]["candidate"] and r["search"] == rec["chosen"]["search"]
        mark = (lambda x: f"**{x}**") if chosen else str
        lines.append(f"| {mark(r['candidate'])} | {r['model']} | {r['updates']:,} | "
                     f"{duration(r['training_minutes'] * 60)} | {r['search']} | {mark(score(r['valid_bleu']))} | "
                     f"{score(r['valid_chrf'])} |")
    return "\n".join(lines) + f"\n\n*`{rec['command']}`, run on {machine(rec)}.*"


def modern(rec: dict) -> str:
    """The 2017 blocks and today's at full scale (`experiments/modern_compare.py`): each run's training and scores."""
    lines = [f"Method: {rec['method']}.", "", "| run | model | parameters | updates | training | target tokens/s | "
             "valid perplexity | valid BLEU | valid chrF | test BLEU | test chrF |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rec["rows"]:
        speed = f"{r['target_tokens_per_second']:,}" if r["target_tokens_per_second"] else "not recorded"
        lines.append(f"| {r['candidate']} | {r['switches']} | {r['parameters']:,} | {r['updates']:,} | "
                     f"{duration(r['training_minutes'] * 60)} | {speed} | {r['valid_perplexity']:.2f} | "
                     f"{score(r['valid_bleu'])} | {score(r['valid_chrf'])} | {score(r['test_bleu'])} | "
                     f"{score(r['test_chrf'])} |")
    trained = sorted({r["machine"] for r in rec["rows"]})
    return "\n".join(lines) + (f"\n\n*Trained on {'; '.join(trained)}; `{rec['command']}`, scored on "
                               f"{machine(rec)}.*")


def switches_table(ch: dict) -> str:
    """Chapter 12's measurement at small scale, the table its notebook recorded, with where it ran."""
    table = next((h for h in ch["headlines"] if h.get("name") == "modern-switches" and "rows" in h), None)
    if table is None:
        raise SystemExit("render_tables: notebooks/12_modern.ipynb recorded no modern-switches table; execute it")
    keep = ["valid BLEU", "valid perplexity", "target tokens/s", "KV cache, bytes/token", "parameters"]
    index = [table["columns"].index(c) for c in keep]
    lines = ["| model | " + " | ".join(keep) + " |", "|---|" + "---:|" * len(keep)]
    for row in table["rows"]:
        cells = [row[1 + i] for i in index]
        shown = [f"{v:,.2f}" if isinstance(v, float) and k.startswith("valid") else f"{v:,.0f}"
                 if isinstance(v, (int, float)) else str(v) for k, v in zip(keep, cells)]
        lines.append(f"| {row[0]} | " + " | ".join(shown) + " |")
    return "\n".join(lines) + f"\n\n*From [chapter 12](notebooks/12_modern.ipynb), {ran_on(ch)}.*"


def percent(x) -> str:
    return f"{100 * x:.1f}%"


def benchmark(rec: dict) -> str:
    """`make bench`'s last figures (bench/results/latest.json), with its targets."""
    t, d = rec["training"], rec["decoding"]
    def rounds(other: str) -> str:
        ratios = [a / b for a, b in zip(t["course"]["tokens_per_sec_rounds"], t[other]["tokens_per_sec_rounds"])]
        return f"single rounds {min(ratios):.2f}–{max(ratios):.2f}×"

    rows = [("training speed, course / d2l-style baseline", f"**{t['ratio_train_vs_d2l']:.2f}×** "
             f"({t['course']['tokens_per_sec_median']:,.0f} vs {t['d2l']['tokens_per_sec_median']:,.0f} "
             f"target tokens/s; {rounds('d2l')})", "≥ 3.5×"),
            ("training speed, course / `torch.nn.Transformer`, identical batches",
             f"**{t['ratio_train_vs_nn_transformer']:.2f}×** ({t['torch']['tokens_per_sec_median']:,.0f} "
             f"tokens/s for `nn.Transformer`; {rounds('torch')})", "≥ 1.1×"),
            ("model FLOP utilisation of the course's training (6 × non-embedding parameters × tokens/s ÷ the "
             f"matmul peak measured in the same run, {t['peak_matmul_gflops']:.0f} GFLOP/s)",
             f"**{percent(t['course']['mfu'])}** (d2l-style {percent(t['d2l']['mfu'])}, `nn.Transformer` "
             f"{percent(t['torch']['mfu'])})", "≥ 40%"),
            ("target positions that are padding", f"{percent(t['padding']['course_bucketed'])} length-bucketed; "
             f"{percent(t['padding']['d2l_num_steps_20'])} with d2l's `num_steps=20`", "")]
    b16 = t.get("bf16", {"measured": False, "reason": "this record predates the bf16 contenders"})
    if b16["measured"]:
        rows += [("bf16 (autocast), course bf16 / course fp32", f"**{b16['ratio_course_bf16_vs_fp32']:.2f}×** "
                  f"(bf16 matmul peak {b16['peak_matmul_gflops']:.0f} GFLOP/s)", ""),
                 ("bf16: course bf16 / d2l-style (fp32)", f"**{b16['ratio_course_bf16_vs_d2l']:.2f}×**", "≥ 7×"),
                 ("bf16: course / `nn.Transformer`, both bf16",
                  f"**{b16['ratio_course_vs_nn_transformer_bf16']:.2f}×**", "≥ 1.2×"),
                 ("bf16: MFU of the bf16 peak", f"**{percent(b16['mfu_course_bf16'])}**", "≥ 40%")]
    else:
        rows.append(("bf16", f"not measured: {b16['reason']}", ""))
    speeds = " / ".join(f"{d[k]['sentences_per_sec_median']:,.1f}"
                        for k in ("batched_greedy", "beam4", "one_at_a_time"))
    rows += [(f"decoding {d['sentences']} held-out sentences, sentences/s: batched greedy with KV cache / beam 4 / "
              "one at a time without cache", speeds, ""),
             ("decoding, batched greedy / one at a time", f"**{d['ratio_decode_batched_vs_one_at_a_time']:.1f}×**",
              "≥ 30×"),
             ("the same, against one at a time with the output layer on the newest position only",
              f"{d['ratio_decode_batched_vs_one_at_a_time_last_position']:.1f}×", "context"),
             ("peak memory of `translate` over the same sentences: beam 4 / beam 64",
              " / ".join(f"{d['peak_memory_mb'][k]:,.0f} MB" for k in ("beam4", "beam64")),
              "beam search's state within `--memory-budget`")]
    lines = ["| figure | measured | target |", "|---|---|---|"] + [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines) + (f"\n\n*`{rec['command']}`, {duration(rec['bench_seconds'])}: "
                               f"{t['rounds']} rounds × {t['batches_per_round']} "
                               f"batches per contender, {rec['threads']} threads; decoding with {d['model']}; "
                               f"recorded {machine(rec)}, torch {rec['machine']['torch']}.*")


def soak(rec: dict) -> str:
    k, i = rec["sigkill"], rec["sigint"]
    return (f"`{rec['command']}` on {machine(rec)}: **{k['kills']:,} SIGKILLs** ({k['during_writes']:,} of them "
            f"during a checkpoint write); the checkpoint loaded after every one of the {k['loaded']:,} kills that "
            f"found one, and `--resume` finished the run; **{i['interrupts']:,} SIGINTs** over {i['runs']:,} runs, "
            f"and each of the {i['finished']:,} runs that got to the end had exactly the weights of the "
            "uninterrupted run.")


def module_plan(chapters: list[dict], plan: dict) -> str:
    """The teacher's guide's four-week plan: each session's chapters, with their time to run read from the
    executed notebooks; the outcomes, demonstrations, homework, study hours and deadlines are the plan's."""
    by_number = {ch["path"].stem.split("_")[0]: ch for ch in chapters}
    rows = ["| week | session | chapters | outcomes | time to run | planned study | in class | homework | due |",
            "|---:|---:|---|---|---:|---:|---|---|---|"]
    for i, s in enumerate(plan["sessions"], 1):
        missing = [n for n in s["chapters"] if n not in by_number]
        if missing:
            raise SystemExit(f"render_tables: book/module_plan.json names chapters {missing} that have no notebook")
        walls = [by_number[n]["wall"] for n in s["chapters"]]
        run = duration(sum(walls)) if None not in walls else "not executed"
        names = ", ".join(by_number[n]["title"].split(". ")[0] for n in s["chapters"])
        rows.append(f"| {s['week']} | {i} | {names} | {s['outcomes']} | {run} | {s['study_h']:g} h | {s['demo']} | "
                    f"{s['homework']} | {s['due'] or '-'} |")
    return "\n".join(rows)


def rendered(text: str, marker: str, table: str, name: str) -> str:
    """`text` with the block between `<!-- marker:start -->` and `<!-- marker:end -->` replaced by `table`."""
    pattern = re.compile(rf"(<!-- {marker}:start -->\n)(?:.*?\n)?(<!-- {marker}:end -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"render_tables: {name} has no <!-- {marker}:start --> ... <!-- {marker}:end --> block")
    return pattern.sub(lambda m: m.group(1) + table + "\n" + m.group(2), text)


def render(root: Path = ROOT) -> dict[str, tuple[str, str]]:
    """For each file with a table: (its text now, its text with the tables rendered from the notebooks)."""
    chapters = [chapter(p) for p in sorted((root / "notebooks").glob("*.ipynb"))]
    solutions = [chapter(p) for p in [*sorted((root / "solutions").glob("*.ipynb")),
                                      *sorted((root / "solutions" / "assignments").glob("*.ipynb"))]]
    ours = lambda: [record(root, f"records/{n}.json") for n in PUBLIC]     # the published model's test records
    others = lambda: record(root, "records/tatoeba-others.json")
    plan = lambda: json.loads((root / "book" / "module_plan.json").read_text(encoding="utf-8"))
    tables = {"chapter-table": lambda: readme_table(chapters), "chapter-times": lambda: guide_table(chapters),
              "module-plan": lambda: module_plan(chapters, plan()),
              "solution-times": lambda: guide_table(solutions, "solutions notebook"),
              "results-table": lambda: headline_results(chapters, root),
              "learner-results": lambda: results_table(chapters),
              "chapter-figures": lambda: figures_table(chapters),
              "ablation-subwords": lambda: ablation(record(root, "records/ablation-subwords.json")),
              "benchmark": lambda: benchmark(record(root, "bench/results/latest.json")),
              "soak": lambda: soak(record(root, "records/soak.json")),
              "tatoeba-results": lambda: public_results(ours(), others(), card="models/tatoeba-en-fr/README.md"),
              "tatoeba-public": lambda: public_results(ours(), others()),
              "recipe-tatoeba": lambda: recipe(record(root, "records/recipe-tatoeba.json")),
              "modern-tatoeba": lambda: modern(record(root, "records/modern-tatoeba.json")),
              "modern-switches": lambda: switches_table(next(c for c in chapters if c["path"].stem == "12_modern")),
              "tatoeba-limits": lambda: limits(record(root, "records/recipe-tatoeba.json"), ours(), others())}
    tables |= {name: (lambda n=name: published(record(root, f"records/{n}.json"))) for name in PUBLISHED}
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
    stale = []
    for name, (now, new) in render().items():
        if now != new:
            stale.append(name)
            if not args.check:
                (ROOT / name).write_text(new, encoding="utf-8")
    if args.check and stale:
        print(f"render_tables: out of date with the notebooks and records: {', '.join(stale)}; run python tools/render_tables.py")
        return 1
    print(("rewrote " + ", ".join(stale)) if stale and not args.check else "tables match the notebooks and the records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
