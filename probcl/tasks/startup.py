"""What ``probcl pretrain`` says before it trains: a summary of the data and of the optimisation it will run
(:class:`StartupSummary`), one warning line when the run will take too few optimiser steps to learn much, and
the refusal of a batch that the data cannot fill.

A batch larger than the training images is refused (ConfigError), not lowered to fit: the batch size is part of
a method's recipe (the number of negatives of a contrastive loss, BatchNorm statistics), so changing it behind
the user's back would train something else than the config says.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import lightning.pytorch as pl
import torch

from probcl.config import VIEW_PRESETS, Config
from probcl.data.augment import resolve_backend, resolve_view_params
from probcl.data.sources import ImageSource
from probcl.errors import ConfigError

FEW_STEPS = 50  # fewer optimiser steps than this in all: the run is warned about
# the smallest batch the few-steps warning suggests: the in-batch negatives of a contrastive loss (SimCLR's 2B-2)
# and BatchNorm's statistics come from the batch, so a smaller one would train another recipe, not a longer run
SMALLEST_SUGGESTED_BATCH = 32


def steps_per_epoch(images: int, batch_size: int, processes: int = 1, limit: float | None = None) -> int:
    """Optimiser steps per epoch, as the training loop takes them: each of ``processes`` gets
    ``images // processes`` images of the epoch's order (``ResumableSampler``) in full batches only (the
    ``ResumableLoader`` drops the last, partial one: floor), capped by ``train.limit_train_batches`` as Lightning
    caps it (:func:`limited_batches`). A batch the data cannot fill is one ConfigError."""
    per_process = images // processes
    full = per_process // batch_size
    if full == 0:
        where = f" per process ({images} in all, {processes} processes)" if processes > 1 else ""
        raise ConfigError(
            f"train.batch_size={batch_size} exceeds the {per_process} training images{where}: batches are always "
            f"full, so no optimiser step could be taken. {_smaller_batch(per_process)}"
        )
    steps = limited_batches(full, limit)
    if steps == 0:
        raise ConfigError(
            f"train.limit_train_batches={limit} of the {full} batches per epoch leaves none; "
            f"use at least {1 / full:.3g} (a fraction) or 1 (a count)"
        )
    return steps


def limited_batches(batches: int, limit: float | None) -> int:
    """The batches of an epoch of ``batches`` that run under ``train.limit_train_batches``, as Lightning counts
    them: a whole number is a count (``1``: one batch), a number in (0, 1) a fraction, rounded down."""
    if limit is None:
        return batches
    if float(limit).is_integer():
        return min(batches, int(limit))
    if not 0 < limit < 1:
        raise ConfigError(
            f"train.limit_train_batches={limit} is neither a whole number of batches nor a fraction in (0, 1)"
        )
    return int(batches * limit)


def _smaller_batch(per_process: int) -> str:
    """How to fix a batch the data cannot fill: a power of two giving about 8 steps per epoch."""
    if per_process < 2:
        return "Add training images (a batch holds at least 2)"
    batch = 2 ** max(1, int(math.log2(max(2, per_process // 8))))
    return f"Lower it, e.g. --train.batch_size {batch} ({per_process // batch} steps per epoch)"


@dataclass(frozen=True)
class StartupSummary:
    """The data and the optimisation of a pretraining run, as it is about to start."""

    dataset: str
    images: int
    classes: int | None
    channels: int
    channels_note: str  # how the channel count was chosen, where it was not given
    image_size: int
    size_note: str  # how the size was chosen, where data.image_size does not give it and the images do not
    augment: str  # augment.preset, its recipe (ViewParams.describe) with a note where it matters, and the backend
    batch_size: int
    processes: int
    steps_per_epoch: int
    batches_per_epoch: int  # full batches per process and epoch, before train.limit_train_batches caps them
    epochs: int
    precision: str
    device: str

    @property
    def total_steps(self) -> int:
        """Optimiser steps of the whole run."""
        return self.steps_per_epoch * self.epochs

    def lines(self) -> list[str]:
        """The summary as printed, one fact a line."""
        classes = f"{self.classes} classes" if self.classes else "unlabeled"
        size = f"{self.image_size} x {self.image_size} px" + (f" ({self.size_note})" if self.size_note else "")
        batch = f"{self.batch_size}" + (f" per process x {self.processes} processes" if self.processes > 1 else "")
        capped = (
            f" (of {self.batches_per_epoch}: train.limit_train_batches)"
            if self.steps_per_epoch < self.batches_per_epoch
            else ""
        )
        return [
            f"probcl pretrain: {self.dataset}",
            f"  images     {self.images} ({classes})",
            f"  channels   {self.channels}" + (f" ({self.channels_note})" if self.channels_note else ""),
            f"  size       {size}",
            f"  augment    {self.augment}",
            f"  batch      {batch}",
            f"  steps      {self.steps_per_epoch} per epoch{capped} x {_epochs(self.epochs)} = "
            f"{self.total_steps} optimiser steps",
            f"  precision  {self.precision}",
            f"  device     {self.device}",
        ]

    def warning(self) -> str | None:
        """One actionable line when the data and batch allow fewer than :data:`FEW_STEPS` optimiser steps in all,
        else None (a cap by ``train.limit_train_batches`` is the user's own choice, e.g. a smoke test)."""
        if self.batches_per_epoch * self.epochs >= FEW_STEPS:
            return None
        fix = f"raise train.epochs to {math.ceil(FEW_STEPS / self.batches_per_epoch)}"
        per_process = self.images // self.processes
        batch = 2 ** int(math.log2(max(2, per_process * self.epochs // FEW_STEPS)))
        if SMALLEST_SUGGESTED_BATCH <= batch < self.batch_size and per_process // batch * self.epochs >= FEW_STEPS:
            fix += f", or lower train.batch_size to {batch} ({per_process // batch} steps per epoch)"
        return (
            f"probcl: warning: this run takes only {self.total_steps} optimiser steps ({self.steps_per_epoch} per "
            f"epoch x {_epochs(self.epochs)}; {self.images} images, batch {self.batch_size}), too few to learn a "
            f"representation; {fix}"
        )


def _epochs(count: int) -> str:
    return f"{count} epoch{'s' if count != 1 else ''}"


def size_note(cfg: Config) -> str:
    """Why a folder trains at the size it does when ``data.image_size`` is not set: folders have no native size."""
    if cfg.data.image_size is not None or not cfg.data.dataset.startswith("folder:"):
        return ""
    return "a folder's default, whatever size its images are; data.image_size sets it"


def augment_line(cfg: Config, channels: int, device: torch.device) -> str:
    """``augment.preset``, its recipe, a note when a recipe for gray images meets colour ones, and the backend
    that makes the views on ``device`` (``augment.backend``; what ``auto`` chose, and where)."""
    params = resolve_view_params(cfg.augment)
    line = f"{cfg.augment.preset}: {params.describe()}"
    if channels == 3 and not params.colour_distortion and cfg.augment.preset != "none":
        colour = ", ".join(name for name, p in VIEW_PRESETS.items() if p.colour_distortion)
        line += f" (no colour distortion on colour images: augment.preset {colour} have one)"
    backend = cfg.augment.backend
    line += f"; backend {resolve_backend(backend, device)}"
    return line + (f" (auto on {device.type})" if backend == "auto" else "")


def summarize(cfg: Config, train: ImageSource, trainer: pl.Trainer) -> StartupSummary:
    """The start-up summary of pretraining ``cfg`` on ``train`` with ``trainer`` (built, not yet fitted)."""
    t = cfg.train
    processes = trainer.world_size
    full = steps_per_epoch(len(train), t.batch_size, processes)
    steps = steps_per_epoch(len(train), t.batch_size, processes, t.limit_train_batches)
    device = trainer.strategy.root_device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    return StartupSummary(
        dataset=cfg.data.dataset,
        images=len(train),
        classes=train.num_classes,
        channels=train.channels,
        channels_note=train.channels_note or ("data.channels" if cfg.data.channels != "auto" else ""),
        image_size=train.image_size,
        size_note=size_note(cfg),
        augment=augment_line(cfg, train.channels, device),
        batch_size=t.batch_size,
        processes=processes,
        steps_per_epoch=steps,
        batches_per_epoch=full,
        epochs=t.epochs,
        precision=str(trainer.precision),
        device=f"{device}" + (f" ({name})" if name else ""),
    )


def announce(summary: StartupSummary) -> None:
    """Print the summary on stdout and its warning, if any, as one line on stderr."""
    print("\n".join(summary.lines()))
    warning = summary.warning()
    if warning is not None:
        print(warning, file=sys.stderr)
