"""`python -m nmt_lib train|translate|evaluate|average`. The options are built from the
settings dataclasses, so `--help` and the code share one set of defaults; the tools
switch chapter 10's speed-ups on.
"""

import argparse
import itertools
import shlex
import sys
import time
import warnings
from functools import partial

from nmt_lib.base.course import number
from nmt_lib.base.device import default_device, parse_device, use_threads
from nmt_lib.modern import ModernParts
from nmt_lib.run import average
from nmt_lib.run.checkpoint import CheckpointError
from nmt_lib.run.corpus import CorpusSettings
from nmt_lib.run.inference import SORTED_LINES, evaluate_checkpoint, evaluate_public
from nmt_lib.run.inference import int8, translate_lines
from nmt_lib.run.published import load_model
from nmt_lib.run.records import evaluation_record, write_record
from nmt_lib.run.testsets import TEST_SETS
from nmt_lib.transformer import TransformerConfig


def build_parser(
    run_settings=None, train_prog=None, *, train_options: bool = True
) -> argparse.ArgumentParser:
    """The tools' options; `train` takes those of `run_settings` (`RunSettings` or a
    subclass), and `train_prog` names it (`python -m speedrun.train`). Without
    `train_options`, `train` is listed but takes none."""
    parser = argparse.ArgumentParser(
        prog=train_prog or "python -m nmt_lib",
        description="Train, use and evaluate the course's Transformer translator.",
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="{train,translate,evaluate,average}"
    )
    positive = number(int, minimum=1)
    t = sub.add_parser(
        "train",
        prog=train_prog,
        help="train a Transformer on a tab-separated corpus",
        description="Train on the train split of a TSV corpus (source<TAB>target per"
        " line).",
    )
    if train_options:
        add_train_options(t, run_settings)
    tr = sub.add_parser(
        "translate",
        help="translate English lines from stdin to French on stdout",
        description="Read raw sentences on stdin, one per line; write one translation"
        " per line.",
    )
    ev = sub.add_parser(
        "evaluate",
        help="sacreBLEU on the held-out test split",
        description="Translate the held-out split the data settings define (or, with"
        " --test, a public test set) and score it with sacreBLEU (lowercase when the"
        " model lowercases).",
    )
    for p in (tr, ev):
        model = p.add_mutually_exclusive_group(required=True)
        model.add_argument("--checkpoint", help="checkpoint written by train")
        model.add_argument(
            "--model", help="a published model: 'published', or a folder"
        )
        p.add_argument("--beam", type=positive, default=1, help="beam size (1: greedy)")
        p.add_argument(
            "--length-penalty",
            type=number(float, minimum=0),
            default=1.0,
            metavar="ALPHA",
            help="with --beam: a hypothesis scores log p / length ** ALPHA (1.0)",
        )
        p.add_argument(
            "--batch-size", type=positive, default=64, help="sentences per batch (64)"
        )
        p.add_argument(
            "--int8",
            action="store_true",
            help="linear layers in int8 on the CPU: about twice the speed, for the BLEU"
            " the Benchmarks page measures",
        )
    tr.add_argument(
        "--tokenized", action="store_true", help="print tokens as the model writes them"
    )
    ev.add_argument("--data", help="where the corpus is now, if it has moved")
    ev.add_argument(
        "--data-changed-ok",
        action="store_true",
        help="evaluate even if the corpus file differs from the one trained on",
    )
    ev.add_argument(
        "--split", choices=["test", "valid"], help="the held-out split to score (test)"
    )
    ev.add_argument(
        "--test",
        choices=TEST_SETS,
        help="score a public test set instead, with sacreBLEU's defaults"
        " (case-sensitive, one reference a line): tatoeba, the Tatoeba Translation"
        " Challenge's English-French test, v2021-08-07",
    )
    ev.add_argument(
        "--overlap-ok",
        action="store_true",
        help="with --test: score a model trained without --exclude for it anyway",
    )
    ev.add_argument("--limit", type=positive, help="the first N distinct sentences")
    ev.add_argument(
        "--record",
        metavar="FILE",
        help="also write the scores, with the model, data, training and machine, as"
        " JSON to FILE (the book's results are rendered from these)",
    )
    average.add_parser(sub)
    for p in (t, tr, ev):
        p.add_argument(
            "--device",
            help="cpu, cuda, cuda:N or mps (default: $NMT_DEVICE, else a GPU if any)",
        )
        p.add_argument(
            "--threads",
            type=positive,
            help="CPU threads for PyTorch (default: $NMT_THREADS, else all cores)",
        )
    return parser


def add_train_options(t, run_settings=None):
    """`train`'s options (imported here: chapter 9's settings bring its loop and pandas,
    which `translate` and `evaluate` start faster without)."""
    from nmt_lib.run.settings import FAST, PROGRESS, RunSettings, add_settings

    t.add_argument("--out", required=True, help="checkpoint file to write")
    t.add_argument(
        "--resume",
        action="store_true",
        help="continue the run saved in --out with its model, data and training"
        " settings; only --epochs, --max-steps, --time-limit, --checkpoint-every,"
        " --keep-last, --precision, --threads, --device and --progress may differ, and"
        " --data may say where the corpus is now",
    )
    t.add_argument(
        "--data-changed-ok",
        action="store_true",
        help="resume even if the corpus file differs from the one the run started on"
        " (its held-out split may then hold training sentences)",
    )
    t.add_argument(
        "--progress",
        choices=PROGRESS,
        default="auto",
        help="auto: a bar in a terminal, a line every 30 s in a log file (auto)",
    )
    add_settings(t, CorpusSettings)
    add_settings(t, TransformerConfig, FAST)
    add_settings(t, ModernParts)
    add_settings(t, run_settings or RunSettings, FAST)


def train_command(args, parser, run_class=None) -> int:
    from nmt_lib.run import train_command, trainer  # for train alone

    return train_command.train_command(args, parser, run_class or trainer.Run)


def stdin_batches(size: int):
    """Standard input's lines: one at a time when typed at a terminal, else up to `size`
    at once (`translate_lines` sorts them by length)."""
    while batch := list(itertools.islice(sys.stdin, 1 if sys.stdin.isatty() else size)):
        yield batch


def translate_command(args, parser) -> int:
    ckpt = load_model(args.checkpoint, args.model, args.device)
    ckpt = int8(ckpt) if args.int8 else ckpt
    warn = lambda message: sys.stderr.write(f"{parser.prog} translate: {message}\n")
    done = 0
    for lines in stdin_batches(max(args.batch_size, SORTED_LINES)):
        out = translate_lines(
            ckpt,
            lines,
            beam=args.beam,
            alpha=args.length_penalty,
            batch_size=args.batch_size,
            tokenized=args.tokenized,
            first=done + 1,
            warn=warn,
        )
        print("".join(text + "\n" for text in out), end="", flush=True)
        done += len(lines)
    return 0


def evaluate_command(args, parser) -> int:
    if args.test and (args.split or args.data):
        parser.error(
            "--test scores a public test set; --split and --data choose the "
            "corpus's split instead"
        )
    ckpt = load_model(args.checkpoint, args.model, args.device)
    ckpt = int8(ckpt) if args.int8 else ckpt
    started = time.perf_counter()
    search = dict(beam=args.beam, alpha=args.length_penalty, limit=args.limit)
    search["batch_size"] = args.batch_size
    if args.test:
        r = evaluate_public(ckpt, test=args.test, overlap_ok=args.overlap_ok, **search)
    else:
        r = evaluate_checkpoint(
            ckpt,
            data_path=args.data,
            split=args.split or "test",
            data_changed_ok=args.data_changed_ok,
            **search,
        )
    print("".join(line + "\n" for line in r.report()), end="", flush=True)
    if args.record:
        command = " ".join(["python -m nmt_lib", *map(shlex.quote, args.argv)])
        seconds = time.perf_counter() - started
        record = evaluation_record(ckpt, r, command=command, seconds=seconds)
        write_record(args.record, record)
    return 0


def main(argv=None, run_class=None) -> int:
    """`python -m nmt_lib`; returns the exit status. `run_class`, a subclass of the
    trainer's `Run`, trains with its own settings."""
    run_settings = getattr(run_class, "settings_class", None)
    train_prog = getattr(run_class, "command", None)
    argv = list(sys.argv[1:] if argv is None else argv)
    # the command comes first; only train needs its options
    parser = build_parser(run_settings, train_prog, train_options=argv[:1] == ["train"])
    args = parser.parse_args(argv)
    args.argv = argv
    if getattr(args, "length_penalty", 1.0) != 1.0 and args.beam == 1:
        parser.error(
            "--length-penalty ranks the hypotheses of beam search: give "
            "--beam K (2 or more) too"
        )
    command = {
        "train": partial(train_command, run_class=run_class),
        "translate": translate_command,
        "evaluate": evaluate_command,
        "average": average.average_command,
    }
    name = train_prog or f"{parser.prog} {args.command}"
    errors = (CheckpointError, OSError, ValueError)  # each said in one line
    if args.command == "train":  # which alone can diverge
        from nmt_lib.loop import TrainingDiverged

        errors += (TrainingDiverged,)
    try:
        device = getattr(args, "device", None)
        args.device = (
            parse_device(device, source="--device") if device else default_device()
        )
        use_threads(getattr(args, "threads", None))
    except ValueError as e:
        parser.error(str(e))
    # a warning is one plain line, not a line of our source
    with warnings.catch_warnings():
        warnings.showwarning = lambda message, *rest, **kw: sys.stderr.write(
            f"{name}: warning: {message}\n"
        )
        try:
            return command[args.command](args, parser)
        except BrokenPipeError:  # the reader went away (`| head`): nothing left to say
            sys.stdout = None  # and nothing to flush at exit
            return 0
        except errors as e:
            sys.stderr.write(f"{name}: error: {e}\n")
            return 1
        except KeyboardInterrupt:
            sys.stderr.write(f"\n{name}: interrupted\n")
            return 130
