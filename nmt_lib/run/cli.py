"""`python -m nmt_lib train|translate|evaluate`: the command-line tools. Their options are built from
the settings dataclasses (`TransformerConfig`, `RunSettings`, `CorpusSettings`), so `--help` and the
code share one set of defaults; the tools switch chapter 10's speed-ups on."""
import argparse
import os
import shlex
import sys
import time
import warnings
from contextlib import nullcontext
from dataclasses import asdict, fields
from pathlib import Path

import torch

from nmt_lib.run import average
from nmt_lib.base.cache import SaveError
from nmt_lib.run.checkpoint import CheckpointError, load_checkpoint
from nmt_lib.run.published import load_model
from nmt_lib.run.corpus import CorpusSettings, ParallelCorpus
from nmt_lib.base.device import autocast_dtype, default_device, parse_device, use_threads
from nmt_lib.run.guards import EXIT_STATUS, StopRequest, check_writable, run_lock, stop_on_signals
from nmt_lib.run.inference import (MEMORY_BUDGET, SORTED_LINES, evaluate_checkpoint, evaluate_public, int8, report,
                                   translate_lines)
from nmt_lib.run.testsets import TEST_SETS
from nmt_lib.run.records import evaluation_record, write_record
from nmt_lib.run.options import add_settings, given, number, option
from nmt_lib.run.sizes import check_model_size
from nmt_lib.run.stdio import OutputError, stdin_batches, write_out
from nmt_lib.loop import TrainingDiverged
from nmt_lib.run.progress import PROGRESS
from nmt_lib.run.parallel import join_process_group, launched_by_torchrun, leave_process_group, rank_and_world
from nmt_lib.model_helpers import num_parameters
from nmt_lib.run.trainer import RunSettings, train_run, held_out_line
from nmt_lib.modern import ModernParts
from nmt_lib.transformer import Transformer, TransformerConfig

FAST = {"fast_dropout": True, "loss": "sliced", "fused_adam": True,   # chapter 10's switches, on in the tools,
        "precision": "auto"}                                           # and low precision where it is native
MAX_BATCH = 4096          # translate buffers and decodes this many lines at most: its memory stays bounded
SIZE_HINT = ": check --d-model, --d-ff, --layers and --vocab-size"
RESUMABLE = ("epochs", "max_steps", "time_limit", "checkpoint_every", "keep_last", "precision")  # a resumed run may change


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m nmt_lib", description="Train, use and evaluate the "
                                     "course's Transformer translator.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{train,translate,evaluate,average}")
    positive = number(int, minimum=1)
    t = sub.add_parser("train", help="train a Transformer on a tab-separated corpus",
                       description="Train on the train split of a TSV corpus (source<TAB>target per line).")
    t.add_argument("--out", required=True, help="checkpoint file to write")
    t.add_argument("--resume", action="store_true", help="continue the run saved in --out with its model, data "
                   "and training settings; only --epochs, --max-steps, --time-limit, --checkpoint-every, "
                   "--keep-last, --precision, --threads, --device and --progress may differ, and --data may say where the corpus is now")
    t.add_argument("--data-changed-ok", action="store_true", help="resume even if the corpus file differs from "
                   "the one the run started on (its held-out split may then hold training sentences)")
    t.add_argument("--progress", choices=PROGRESS, default="auto", help="auto: a bar in a terminal, a line "
                   "every 30 s in a log file (auto)")
    add_settings(t, CorpusSettings)
    add_settings(t, TransformerConfig, FAST)
    add_settings(t, ModernParts)
    add_settings(t, RunSettings, FAST)

    tr = sub.add_parser("translate", help="translate English lines from stdin to French on stdout",
                        description="Read raw sentences on stdin, one per line; write one translation per line.")
    ev = sub.add_parser("evaluate", help="sacreBLEU on the held-out test split",
                        description="Translate the held-out split the data settings define (or, with --test, a "
                        "public test set) and score it with sacreBLEU (lowercase when the model lowercases).")
    for p in (tr, ev):
        model = p.add_mutually_exclusive_group(required=True)
        model.add_argument("--checkpoint", help="checkpoint written by train")
        model.add_argument("--model", help="a published model: 'published' (the course's), or its folder")
        p.add_argument("--beam", type=positive, default=1, help="beam size, 1 for greedy (1)")
        p.add_argument("--length-penalty", type=number(float, minimum=0, maximum=4), default=1.0, metavar="ALPHA",
                       help="with --beam: a hypothesis scores its log-probability / length ** ALPHA (1.0)")
        p.add_argument("--batch-size", type=number(int, minimum=1, maximum=MAX_BATCH), default=64,
                       help=f"sentences decoded together, at most {MAX_BATCH:,} (64)")
        p.add_argument("--int8", action="store_true", help="linear layers in int8 on the CPU: about twice the "
                       "speed, for the BLEU the Benchmarks page measures")
    tr.add_argument("--tokenized", action="store_true", help="print tokens as the model writes them")
    ev.add_argument("--data", help="where the corpus is now, if it moved since training")
    ev.add_argument("--data-changed-ok", action="store_true", help="evaluate even if the corpus file differs "
                    "from the one the model was trained on")
    for p in (tr, ev):
        p.add_argument("--memory-budget", type=number(float, minimum=1), default=MEMORY_BUDGET, metavar="MB",
                       help=f"beam search decodes as many sentences together as fit in this many MB "
                       f"({MEMORY_BUDGET})")
    ev.add_argument("--split", choices=["test", "valid"], help="the corpus's held-out split to score (test)")
    ev.add_argument("--test", choices=TEST_SETS, help="score on a public test set instead of the corpus's held-out "
                    "split, with sacreBLEU's defaults (case-sensitive, one reference per line): tatoeba, the Tatoeba "
                    "Translation Challenge's English-French test, v2021-08-07")
    ev.add_argument("--overlap-ok", action="store_true", help="with --test: score a model trained without "
                    "--exclude for that test set anyway")
    ev.add_argument("--limit", type=positive, help="only the first N distinct sentences")
    ev.add_argument("--record", metavar="FILE", help="also write the scores, with the model, data and training "
                    "they belong to and the machine, as JSON to FILE (the book's results are rendered from these)")
    average.add_parser(sub)
    for p in (t, tr, ev):
        p.add_argument("--device", help="cpu, cuda, cuda:N or mps (default: $NMT_DEVICE, else a GPU if there is one)")
        p.add_argument("--threads", type=positive, help="CPU threads for PyTorch (default: $NMT_THREADS, else all cores)")
    return parser


def new_settings(args, parser) -> tuple[RunSettings, dict, dict, ModernParts]:
    """The settings of a run that starts now, checked before anything is read, written or locked."""
    try:
        settings = RunSettings(**given(args, RunSettings, FAST))
        model_options = given(args, TransformerConfig, FAST)
        parts = ModernParts(**given(args, ModernParts))
        smallest = TransformerConfig(1, 1, **model_options)          # check the sizes before reading the corpus
        check_model_size(asdict(smallest), parts=parts, training=True, hint=SIZE_HINT)
        corpus_options = given(args, CorpusSettings)
        CorpusSettings(**corpus_options)
        if settings.bpe_dropout and corpus_options.get("tokenizer") != "bpe":
            raise ValueError("--bpe-dropout samples subword pieces: it needs --tokenizer bpe")
        if model_options.get("tie_embeddings") and not corpus_options.get("shared_vocab"):
            raise ValueError("--tie-embeddings needs --shared-vocab: one matrix can only serve one vocabulary")
    except (TypeError, ValueError) as e:
        parser.error(str(e))
    return settings, model_options, corpus_options, parts


def new_run(settings: RunSettings, model_options: dict, corpus_options: dict, parts: ModernParts, device):
    """The corpus and a fresh model for a run that starts now."""
    say("reading the corpus ...\n")
    corpus = ParallelCorpus(**corpus_options)
    cfg = TransformerConfig(len(corpus.src_vocab), len(corpus.tgt_vocab), **model_options)
    check_model_size(asdict(cfg), parts=parts, training=True, hint=SIZE_HINT)     # with the vocabularies' real sizes
    torch.manual_seed(settings.seed)
    model = Transformer(cfg, parts)
    return settings, corpus, model.to(device)          # initialised on the CPU: the same weights on any device


def resume_differences(args, resume: dict, saved_train: dict) -> list[str]:
    """The options given for a resumed run whose values differ from the run's own (only RESUMABLE may)."""
    differ = []
    for cls, stored in ((TransformerConfig, resume["config"]), (ModernParts, resume.get("parts") or {}),
                        (RunSettings, saved_train), (CorpusSettings, resume["data"])):
        for f in fields(cls):
            value = given(args, cls).get(f.name, stored.get(f.name))
            if f.name not in RESUMABLE + ("path",) and value != stored.get(f.name):
                differ.append(f"{option(f)[0][0]} {value} (the run has {stored.get(f.name)})")
    return differ


def say(text: str):
    """A progress line on stderr; under torchrun, from rank 0 only."""
    if rank_and_world()[0] == 0:
        sys.stderr.write(text)


def train_command(args, parser) -> int:
    fresh = None if args.resume else new_settings(args, parser)   # bad settings: no lock file, nothing read
    out = check_writable(args.out)                # before the corpus is read: no surprise at the first save
    with run_lock(out) if rank_and_world()[0] == 0 else nullcontext():   # rank 0 writes, so rank 0 locks
        return train_locked(args, out, fresh)


def train_locked(args, out: Path, fresh: tuple | None) -> int:
    resume = None
    if args.resume:
        ckpt = load_checkpoint(out, device=args.device)
        resume = ckpt.payload
        if not all(resume.get(k) for k in ("progress", "optimizer", "schedule", "train")):
            raise CheckpointError(f"{out} holds no training state to resume from" + (
                ": it holds averaged weights (average); resume the run's own --out" if
                resume.get("averaged") else ""))
        saved = resume["train"]
        differ = resume_differences(args, resume, saved)
        if differ:
            raise ValueError("--resume goes on with the run as it started, but these options differ from it: "
                             + "; ".join(differ) + ". Leave them out, or start a new run with another --out")
        changes = {k: v for k, v in given(args, RunSettings).items() if k in RESUMABLE}
        settings = RunSettings(**{**saved, "time_limit": None, **changes})
        corpus = ParallelCorpus.from_settings(resume["data"], getattr(args, "data", None),
                                              changed_ok=args.data_changed_ok,
                                              vocabularies=(ckpt.src_vocab, ckpt.tgt_vocab))
        model = ckpt.model
        say(f"resuming {out} at update {resume['progress']['step']:,} "
            f"(epoch {resume['progress']['epoch']})\n")
    else:
        if out.exists() or average.kept_epochs(out):
            raise FileExistsError(f"{out if out.exists() else min(average.kept_epochs(out).values())} exists; "
                                  "pass --resume to continue its run, or choose another --out")
        settings, corpus, model = new_run(*fresh, args.device)
    if corpus.excluded:
        say(f"left out {corpus.excluded['train']:,} training and {corpus.excluded['valid']:,} validation pairs "
            f"that share a sentence with the {corpus.settings['exclude']} test set (--exclude)\n")
    dropped = corpus.drop_longer_than(model.cfg.max_len)
    if any(dropped.values()):
        say(f"left out {dropped['train']:,} training and {dropped['valid']:,} validation pairs longer than "
            f"the model's {model.cfg.max_len} positions (--max-len)\n")
    dtype = autocast_dtype(settings.precision, args.device)
    rank, world = rank_and_world()
    ranks = f" in each of {world} processes (torchrun)" if world > 1 else ""
    say(f"{corpus}\nTransformer: {num_parameters(model):,} parameters on {args.device}{ranks}, computing in "
        f"{'fp32' if dtype is None else str(dtype).replace('torch.', '')}; checkpoint {out}\n")
    announce = lambda name: say(f"\n{name}: stopping after the update in progress, then writing {out}\n")
    with stop_on_signals(StopRequest(), announce) as stop:
        progress = train_run(model, corpus, settings, resume=resume, checkpoint=out,
                             save_kwargs={"data": corpus.settings}, report=args.progress, stop=stop)
    if progress["stopped"] not in (None, "max_steps", "time_limit"):     # a signal, here or on another rank
        say(f"stopped by {progress['stopped']} at update {progress['step']:,}; the checkpoint {out} holds "
            f"everything so far. Go on with: python -m nmt_lib train --out {out} --resume\n")
        return EXIT_STATUS.get(progress["stopped"], EXIT_STATUS["SIGTERM"])
    if rank > 0:                                   # rank 0 alone validated and reports
        return 0
    write_out(f"trained {progress['step']:,} updates in {progress['seconds'] / 60:.1f} min; "
              f"{held_out_line(progress, bool(corpus.splits.valid))}; checkpoint {out}\n")
    return 0


def translate_command(args, parser) -> int:
    if sys.stdout is None:
        raise ValueError("standard output is closed: there is nowhere to write the translations")
    ckpt = load_model(args.checkpoint, args.model, args.device)
    ckpt = int8(ckpt) if args.int8 else ckpt
    if sys.stdin is None:                          # closed (<&-): nothing to translate
        return 0
    warn = lambda message: say(f"{parser.prog} translate: {message}\n")
    done = 0
    for lines in stdin_batches(max(args.batch_size, SORTED_LINES), warn):
        out = translate_lines(ckpt, lines, beam=args.beam, alpha=args.length_penalty, batch_size=args.batch_size, tokenized=args.tokenized,
                              memory_budget=args.memory_budget, first=done + 1, warn=warn)
        write_out("".join(text + "\n" for text in out))     # each batch as soon as it is done
        done += len(lines)
    return 0


def evaluate_command(args, parser) -> int:
    if sys.stdout is None:
        raise ValueError("standard output is closed: there is nowhere to write the scores")
    if args.test and (args.split or args.data):
        parser.error("--test scores a public test set; --split and --data choose the corpus's split instead")
    ckpt = load_model(args.checkpoint, args.model, args.device)
    ckpt = int8(ckpt) if args.int8 else ckpt
    record = check_writable(args.record, "record", "--record") if args.record else None   # fails now, not after
    started = time.perf_counter()
    if args.test:
        r = evaluate_public(ckpt, test=args.test, beam=args.beam, alpha=args.length_penalty, limit=args.limit, batch_size=args.batch_size,
                            memory_budget=args.memory_budget, overlap_ok=args.overlap_ok)
    else:
        r = evaluate_checkpoint(ckpt, data_path=args.data, split=args.split or "test", beam=args.beam, alpha=args.length_penalty, limit=args.limit,
                                batch_size=args.batch_size, data_changed_ok=args.data_changed_ok,
                                memory_budget=args.memory_budget)
    write_out("".join(line + "\n" for line in report(r)))
    if record:
        command = " ".join(["python -m nmt_lib", *map(shlex.quote, args.argv)])
        write_record(record, evaluation_record(ckpt, r, command=command,
                                                    seconds=time.perf_counter() - started))
    return 0


def main(argv=None) -> int:
    """Entry point of `python -m nmt_lib`; returns the exit status."""
    if sys.stderr is None:                         # closed (2>&-): messages go nowhere, but do not fail
        sys.stderr = open(os.devnull, "w")
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if getattr(args, "length_penalty", 1.0) != 1.0 and args.beam == 1:
        parser.error("--length-penalty ranks the hypotheses of beam search: give --beam K (2 or more) too")
    command = {"train": train_command, "translate": translate_command, "evaluate": evaluate_command,
               "average": average.average_command}[args.command]
    name = f"{parser.prog} {args.command}"
    try:
        args.device = parse_device(args.device, source="--device") if getattr(args, "device", None) else default_device()
        if launched_by_torchrun():                 # started by torchrun: one of several data-parallel processes
            if args.command != "train":
                raise ValueError(f"{args.command} runs in one process: start it with python, not torchrun")
            args.device = join_process_group(args.device)
        use_threads(getattr(args, "threads", None))
    except ValueError as e:
        parser.error(str(e))
    with warnings.catch_warnings():                # a warning is one plain line, not a line of our source
        warnings.showwarning = lambda message, *rest, **kw: sys.stderr.write(f"{name}: warning: {message}\n")
        try:
            return command(args, parser)
        except (CheckpointError, FileNotFoundError, FileExistsError, ValueError, TrainingDiverged, SaveError) as e:
            if isinstance(e, OutputError):         # nothing more can reach it, at exit either
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.stderr.write(f"{name}: error: {e}\n")
            return 1
        except KeyboardInterrupt:
            sys.stderr.write(f"\n{name}: interrupted\n")
            return 130
        except BrokenPipeError:                    # the reader went away (`| head`): nothing left to say
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        finally:
            leave_process_group()
