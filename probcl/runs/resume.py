"""Exact resume from any step: a resumable data order and per-step random streams.

A run killed at any moment and resumed from its last checkpoint replays exactly what the
uninterrupted run would have done, because everything random in a training step is a
function of the checkpoint, not of the process history:

* the data order of epoch ``e`` is ``randperm(seed, e)``, and the number of batches the
  loop has consumed is part of the checkpoint (:class:`ResumableLoader`, which Lightning
  saves and restores as a stateful loader), so a resumed epoch continues at the next batch;
* every random stream (torch, CUDA, numpy, python) is re-seeded from ``(seed, global_step,
  rank)`` before each batch (:class:`ExactResume`), so views, Langevin noise and replay-buffer
  draws do not depend on what consumed randomness earlier (the online monitor, a resume).
"""

from __future__ import annotations

import random
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch.utils.data import BatchSampler, DataLoader, Dataset, Sampler

from probcl.data.sources import ImageSource, TensorImages
from probcl.errors import StoppedBySignal
from probcl.runs.metrics_log import JsonlLogger
from probcl.runtime.distributed import rank, world_size

_SEED_STRIDE = 1_000_003  # a prime: (seed, step, rank) -> distinct seeds for any realistic run


def step_seed(seed: int, step: int, process: int = 0) -> int:
    """The seed of all random streams for optimiser step ``step`` on process ``process``."""
    return (seed * _SEED_STRIDE + step) * 1009 + process


def seed_all(seed: int) -> None:
    """Seed torch (CPU and CUDA), numpy and python's ``random``.

    The CUDA generators are seeded only once CUDA is initialised (a training step's is): ``torch.manual_seed``
    would also query the devices on every call, a cost per step on a machine without them."""
    torch.random.default_generator.manual_seed(seed)
    if torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


class ResumableSampler(Sampler[int]):
    """A shuffled order per epoch from ``(seed, epoch)``, this process's share of it, from any position.

    With several processes each takes every ``world_size``-th index of the same permutation
    (trimmed to a multiple of the world size), like ``DistributedSampler(drop_last=True)``.
    ``skip`` indices of the epoch's share are left out once (set when resuming mid-epoch).
    """

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.seed = size, seed
        self.epoch, self.skip = 0, 0

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.skip = epoch, 0

    def _share(self) -> torch.Tensor:
        order = torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed * 100_003 + self.epoch))
        world = world_size()
        return order[: self.size - self.size % world][rank() :: world]

    def __len__(self) -> int:
        return self.size // world_size()

    def remaining(self) -> torch.Tensor:
        """The indices this epoch still has to visit (after ``skip``, which is then spent)."""
        share, skip = self._share(), self.skip
        self.skip = 0  # only the resumed epoch starts late
        return share[skip:]

    def __iter__(self) -> Iterator[int]:
        return iter(self.remaining().tolist())


class _ResumableBatches(BatchSampler):
    """Full batches of a :class:`ResumableSampler`'s order, passing Lightning's ``set_epoch`` on to it. With a
    ``device`` (an in-memory set held on a GPU) the epoch's order is copied there once and each batch is a slice
    of it, so no step copies indices from the host."""

    sampler: ResumableSampler
    device: torch.device | None = None

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        if self.device is None:
            yield from super().__iter__()
            return
        order = self.sampler.remaining().to(self.device)
        for start in range(0, len(order) - self.batch_size + 1, self.batch_size):
            yield order[start : start + self.batch_size]


class _WholeBatches(Dataset):
    """A dataset indexed by a batch's list of indices: :meth:`ImageSource.batch` (one indexing operation for an
    in-memory set; per-image reads, in the loader's worker processes, for a streamed one)."""

    def __init__(self, source: ImageSource) -> None:
        self.source = source

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, indices: list[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.source.batch(indices)

    def __getattr__(self, name: str) -> Any:
        """The training set's own attributes (``labels()``, ``name``, ...): ``trainer.train_dataloader.dataset`` still
        answers as the :class:`ImageSource` it wraps."""
        if name == "source":  # not set yet (unpickling in a worker process)
            raise AttributeError(name)
        return getattr(self.source, name)


class ResumableLoader(DataLoader):
    """A shuffling DataLoader of whole batches whose position (epoch, batches consumed) Lightning checkpoints.

    The training loop reports each batch it starts with :meth:`consumed` (see
    :class:`ExactResume`): prefetched batches do not count, so the saved position is exactly
    the number of batches whose optimiser step the checkpoint contains. Each batch is fetched in one call
    (:meth:`~probcl.data.sources.ImageSource.batch`), not image by image and collated.
    """

    def __init__(self, source: ImageSource, batch_size: int, seed: int, **kwargs: Any) -> None:
        self.order = ResumableSampler(len(source), seed)
        self.images_per_batch = batch_size
        self.batches = _WholeBatches(source)
        self.batch_order = _ResumableBatches(self.order, batch_size, drop_last=True)
        super().__init__(self.batches, batch_size=None, sampler=self.batch_order, **kwargs)
        self.position = {"epoch": 0, "batches": 0}

    def hold_on(self, device: torch.device, max_fraction: float = 0.25) -> bool:
        """Keep an in-memory training set on ``device`` (a GPU), so batches are indexed there and never copied
        from the host; only without worker processes, and only when it takes at most ``max_fraction`` of the
        device's free memory. Call it before iterating (batches are then not pinned). Returns whether it moved."""
        source = self.batches.source
        if device.type != "cuda" or not isinstance(source, TensorImages) or self.num_workers > 0:
            return False
        free, _ = torch.cuda.mem_get_info(device)
        if source.nbytes() > max_fraction * free:
            return False
        self.batches.source = source.to(device)
        self.batch_order.device = device
        self.pin_memory = False  # the batches are on the device already
        return True

    def consumed(self, batches: int) -> None:
        """Record that the loop has started ``batches`` batches of the current epoch."""
        self.position = {"epoch": self.order.epoch, "batches": batches}

    def finished_epoch(self) -> None:
        """Record that the current epoch is complete: a resume starts the next one from its beginning."""
        self.position = {"epoch": self.order.epoch + 1, "batches": 0}

    def state_dict(self) -> dict[str, int]:
        return dict(self.position)

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = dict(state)
        self.order.epoch, self.order.skip = state["epoch"], state["batches"] * self.images_per_batch


class ExactResume(Callback):
    """Keeps the loader position current, re-seeds all random streams from the step before every batch,
    and drops the metrics rows of batches that a resumed run replays."""

    def __init__(self, loader: ResumableLoader, seed: int, metrics: JsonlLogger) -> None:
        self.loader, self.seed, self.metrics = loader, seed, metrics

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.metrics.forget_from(trainer.global_step)  # rows of the batches about to be replayed

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self.loader.consumed(batch_idx + 1)
        seed_all(step_seed(self.seed, trainer.global_step, trainer.global_rank))

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.loader.finished_epoch()  # checkpoint callbacks run after this one

    # Lightning restores the loader's own state only if the loader is built after the checkpoint is
    # read, but ``estimated_stepping_batches`` (the LR schedule) builds it before; callback states
    # are restored earlier, so the position travels here too.
    def state_dict(self) -> dict[str, int]:
        return self.loader.state_dict()

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        self.loader.load_state_dict(state_dict)


class GracefulStop(Callback):
    """SIGTERM (SLURM preemption, spot instances) or Ctrl-C: finish the current batch, write
    ``last.ckpt`` at that step, and stop with :class:`~probcl.errors.RunError` saying how to resume.

    Lightning turns SIGTERM into ``SIGTERMException`` after the batch's metrics are logged; SIGINT is
    routed the same way while training runs. A second Ctrl-C interrupts at once and every later one is ignored
    while the run shuts down; Lightning then exits (``SystemExit`` from its ``KeyboardInterrupt``), which
    :meth:`interrupted` turns into the same kind of error. The caller restores SIGINT with :meth:`restore_sigint`
    once ``fit`` has returned or raised.
    """

    def __init__(self, checkpoint: Path) -> None:
        self.checkpoint = checkpoint
        self.received: str | None = None
        self._previous_sigint: Any = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        def on_sigint(signum: int, frame: Any) -> None:
            signal.signal(signal.SIGINT, on_second_sigint)
            self.received = "SIGINT"
            trainer._signal_connector.received_sigterm = True  # Lightning's stop-after-this-batch flag

        def on_second_sigint(signum: int, frame: Any) -> None:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # shutting down: a third press changes nothing
            raise KeyboardInterrupt

        if threading.current_thread() is threading.main_thread():
            self._previous_sigint = signal.signal(signal.SIGINT, on_sigint)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.restore_sigint()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException):
            trainer.save_checkpoint(self.checkpoint, weights_only=False)
            self.received = self.received or "SIGTERM"

    def restore_sigint(self) -> None:
        """Give SIGINT back the handler it had before training started."""
        if self._previous_sigint is not None:
            signal.signal(signal.SIGINT, self._previous_sigint)
            self._previous_sigint = None

    def stopped(self, step: int) -> StoppedBySignal:
        """The error to raise after the stop: where the state is and how to go on."""
        number = signal.SIGINT if self.received == "SIGINT" else signal.SIGTERM
        return StoppedBySignal(
            f"stopped by {self.received} after step {step}; the run's state is saved in "
            f"{self.checkpoint}. Run the same command again (`probcl pretrain` or `probcl benchmark`) to resume "
            f"from it (SLURM: `#SBATCH --signal=SIGTERM@90` and requeue the job).",
            number,
        )

    def interrupted(self, step: int) -> StoppedBySignal:
        """The error to raise when Ctrl-C interrupted ``fit`` before a stop could save the state (a second
        Ctrl-C, or one while Lightning set up or finished the run): which state is kept, and how to go on."""
        when = "a second Ctrl-C" if self.received == "SIGINT" else "Ctrl-C (SIGINT)"
        kept = (
            f"{self.checkpoint} holds the last state saved and is intact. Run the same command again to resume from it"
            if self.checkpoint.exists()
            else "no checkpoint had been written yet. Run the same command again to start over"
        )
        return StoppedBySignal(
            f"stopped by {when} at step {step}, before that step's state was saved; {kept}.", signal.SIGINT
        )
