#!/usr/bin/env python3
"""`python -m nmt_lib train` with what the speedrun's records tried besides: a warm-down
of the learning rate (`--warmdown F`), a moving average of the weights (`--ema DECAY`)
and BPE-dropout (`--bpe-dropout P`). Each checkpoint also records the run's sittings
(where and with how many threads each stretch ran), which assignment 3's rules check.

    python -m speedrun.train --out runs/ema.pt --ema 0.999 --time-limit 30 ...
    python -m speedrun.train --ema-out runs/ema.pt runs/ema.ema.pt  # the average alone
"""

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from nmt_lib.base.cache import atomic_save
from nmt_lib.base.course import setting
from nmt_lib.data import BucketSampler
from nmt_lib.run import cli
from nmt_lib.run.average import refuse_a_runs_checkpoint, weights_only
from nmt_lib.run.checkpoint import load_checkpoint
from nmt_lib.run.parallel import all_sum
from nmt_lib.run.records import cpu_name
from nmt_lib.run.settings import RunSettings
from nmt_lib.run.trainer import Run
from nmt_lib.subword import SubwordVocab


@dataclass
class SpeedrunSettings(RunSettings):
    warmdown: float = setting(
        0.0,
        "the last fraction of the run's budget (--time-limit, else --max-steps) over "
        "which the learning rate falls linearly to zero, e.g. 0.2 (0: none)",
    )
    ema: float = setting(
        0.0,
        "decay of an exponential moving average of the weights, updated after each "
        "update and kept in the checkpoint (0: none)",
    )
    bpe_dropout: float = setting(
        0.0,
        "BPE-dropout: segment the training split anew at each epoch, each merge "
        "skipped with this probability (SentencePiece's sampling; 0.1 in its paper; "
        "needs --tokenizer bpe; 0: the usual pieces)",
    )

    def __post_init__(self):
        super().__post_init__()
        for name, example in (("ema", 0.999), ("bpe_dropout", 0.1)):
            if not 0 <= (value := getattr(self, name)) < 1:
                raise ValueError(
                    f"{name} must be in [0, 1), e.g. {example}, got {value}"
                )
        if not 0 <= self.warmdown <= 1:
            raise ValueError(
                f"warmdown must be in [0, 1], e.g. 0.2, got {self.warmdown}"
            )
        if self.warmdown and self.time_limit is None and self.max_steps is None:
            raise ValueError(
                "warmdown needs a budget to end at: give --time-limit or --max-steps"
            )


def new_sitting(progress: dict, device, world: int) -> dict:
    """A stretch of a run that starts now: where it computes, from which update."""
    if device.type == "cuda":
        where = torch.cuda.get_device_name(device)
    else:
        where = cpu_name() if device.type == "cpu" else device.type
    processes = f", {world} processes" if world > 1 else ""
    return {
        "from_update": progress["step"],
        "to_update": progress["step"],
        "seconds": 0.0,
        "machine": f"{where}, {torch.get_num_threads()} threads{processes}",
    }


def close_sitting(progress: dict, sitting: dict, seconds: float):
    """Bring `sitting` up to date; it joins `progress["sessions"]` once it updated."""
    sitting.update(to_update=progress["step"], seconds=round(seconds, 1))
    sittings = progress.setdefault("sessions", [])
    if sitting["to_update"] > sitting["from_update"] and sitting not in sittings:
        sittings.append(sitting)


class Resegmenting(BucketSampler):
    """BPE-dropout (Provilkov et al., 2020): each epoch, `set_epoch` segments every
    training pair anew by SentencePiece's sampling (each merge skipped with probability
    `dropout`), seeded by the epoch; a pair too long for `max_len` or `max_tokens` keeps
    its usual pieces."""

    def __init__(self, dataset, pairs, dropout: float, max_len: int, **kwargs):
        self.dataset, self.pairs = dataset, pairs
        self.dropout, self.max_len = dropout, max_len
        self.usual = dataset.src, dataset.tgt
        super().__init__(dataset.lengths(), **kwargs)

    def set_epoch(self, epoch: int):
        import sentencepiece as spm

        super().set_epoch(epoch)
        # the process's generator: an encode on one thread draws from it in order
        spm.set_random_generator_seed(self.seed + epoch)
        vocabs = self.dataset.src_vocab, self.dataset.tgt_vocab
        drawn = [
            vocab.sp.encode(
                [pair[side] for pair in self.pairs],
                enable_sampling=True,
                alpha=self.dropout,
                nbest_size=-1,
                num_threads=1,
            )
            for side, vocab in enumerate(vocabs)
        ]
        self.dataset.src, self.dataset.tgt = drawn
        limit = min(self.max_len, self.max_tokens or self.max_len)
        fits = [n <= limit for n in self.dataset.lengths()]
        self.dataset.src, self.dataset.tgt = (
            [d if ok else u for d, u, ok in zip(new, usual, fits)]
            for new, usual in zip(drawn, self.usual)
        )
        self.lengths = self.dataset.lengths()


class Resegmented:
    """A corpus whose training loader draws new subword pieces each epoch."""

    def __init__(self, corpus, dropout: float, max_len: int):
        if not isinstance(corpus.tgt_vocab, SubwordVocab):
            raise ValueError(
                "--bpe-dropout samples subword pieces: give --tokenizer bpe"
            )
        self.corpus, self.dropout, self.max_len = corpus, dropout, max_len

    def __getattr__(self, name):
        return getattr(self.corpus, name)

    def loader(self, split: str = "train", batch_size: int = 64, **kwargs):
        loader = self.corpus.loader(split, batch_size, **kwargs)
        if split != "train":
            return loader
        usual = loader.batch_sampler
        sampler = Resegmenting(
            loader.dataset,
            self.corpus.splits.train,
            self.dropout,
            self.max_len,
            batch_size=usual.batch_size,
            max_tokens=usual.max_tokens,
            shuffle=usual.shuffle,
            seed=usual.seed,
        )
        return torch.utils.data.DataLoader(
            loader.dataset, batch_sampler=sampler, collate_fn=loader.collate_fn
        )


class Speedrun(Run):
    """The library's run with the warm-down, moving average, BPE-dropout, sittings."""

    settings_class = SpeedrunSettings
    command = "python -m speedrun.train"

    def __init__(self, model, data, settings, **kwargs):
        super().__init__(model, data, settings, **kwargs)
        self.ema = None  # a copy of the model, lerped after each update
        if settings.ema:
            decay = get_ema_multi_avg_fn(settings.ema)
            self.ema = AveragedModel(model, multi_avg_fn=decay, use_buffers=True)
            if self.resume is not None:
                self.ema.load_state_dict(self.resume["ema"])
        self.sitting = new_sitting(self.progress, self.device, self.world)

    def training_data(self, model):
        if not self.settings.bpe_dropout:
            return self.data
        return Resegmented(self.data, self.settings.bpe_dropout, model.cfg.max_len)

    def after_update(self) -> bool:
        # before the checkpoint a resumed run starts from: the moving average, and the
        # next update's rate (the schedule's times what the warm-down leaves)
        if self.ema is not None:
            self.ema.update_parameters(self.model)
        if self.settings.warmdown:
            left = self.warmdown_left(self.progress["step"])
            rates = self.schedule.get_last_lr()
            for group, rate in zip(self.optimizer.param_groups, rates):
                group["lr"] = rate * left
        return super().after_update()

    def warmdown_left(self, step: int) -> float:
        """1 until the last `warmdown` fraction of the budget (the time limit, with
        earlier sittings' minutes, the ranks' mean; else max_steps), then down to 0."""
        if self.settings.time_limit is not None:
            spent = self.spent_before + time.perf_counter() - self.start
            budget = self.spent_before + 60 * self.settings.time_limit
            done = all_sum(spent / budget, device=self.device)[0] / self.world
        else:
            done = step / self.settings.max_steps
        return min(1.0, max(0.0, (1 - done) / self.settings.warmdown))

    def save(self):
        close_sitting(self.progress, self.sitting, time.perf_counter() - self.start)
        super().save()

    def extras(self) -> dict:
        return {"ema": self.ema.state_dict() if self.ema is not None else None}


def ema_checkpoint(path, out) -> Path:
    """Write to `out` the moving average of the weights (`--ema`) the checkpoint at
    `path` keeps, as a checkpoint of its own."""
    path, out = Path(path), Path(out)
    refuse_a_runs_checkpoint(out)
    payload = load_checkpoint(path, device="cpu").payload
    if payload.get("ema") is None:
        raise ValueError(
            f"{path} keeps no moving average of its weights: train with "
            "--ema DECAY (e.g. 0.999)"
        )
    weights = {
        name.removeprefix("module."): t
        for name, t in payload["ema"].items()
        if name != "n_averaged"
    }
    averaged = {"ema": payload["train"]["ema"]}
    return atomic_save(weights_only(payload, weights, averaged), out)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--ema-out"] and len(argv) == 3:
        print(f"wrote {ema_checkpoint(argv[1], argv[2])}")
        return 0
    return cli.main(["train", *argv], run_class=Speedrun)


if __name__ == "__main__":
    sys.exit(main())
