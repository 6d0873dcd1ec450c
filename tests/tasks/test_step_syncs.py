"""Between logging steps the training loop reads nothing back from the device (a GPU never waits for the host).

On CPU a host-device synchronisation is free, so it is counted instead: every Python-level read of a tensor's
value (``item``, ``tolist``, ``cpu``, ``numpy``, ``bool``/``int``/``float`` of a tensor) made by probcl or
Lightning code during a training step that does not log is a failure. Reads inside torch itself (e.g. Adam's
step counter, a CPU tensor on every device) are not probcl's to remove and are not counted.

Methods whose sampling is a data-dependent loop read the device by design and are not listed: C-SimCLR and
C-BYOL (the vMF rejection sampler checks after each round whether all draws are accepted), EBCLR (its SGLD
chain and gradient-norm stop), VEM (particle banks filled to a host-side count).
"""

from __future__ import annotations

import sys
from pathlib import Path

import lightning
import pytest
import torch
from lightning.pytorch.callbacks import Callback

import probcl
from probcl.tasks.pretrain import pretrain

READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__")
WATCHED = (str(Path(probcl.__file__).parent), str(Path(lightning.__file__).parent))


class ReadCounter(Callback):
    """Counts tensor reads by probcl/Lightning code from the start of one batch to the start of the next, for the
    batches whose step does not log (not the first, warm-up step, nor the last, which ends the epoch)."""

    def __init__(self) -> None:
        self.window: int | None = None  # the step whose window is open, when it is counted
        self.reads: dict[int, list[str]] = {}
        self.counted_steps: list[int] = []

    def record(self, name: str) -> None:
        if self.window is None:
            return
        caller = sys._getframe(2)
        if caller.f_code.co_filename.startswith(WATCHED):
            where = f"{name} at {caller.f_code.co_filename}:{caller.f_lineno}"
            self.reads.setdefault(self.window, []).append(where)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        step = trainer.global_step
        logs = (step + 1) % trainer.log_every_n_steps == 0
        last = batch_idx + 1 == trainer.num_training_batches
        self.window = None if (step == 0 or logs or last) else step
        if self.window is not None:
            self.counted_steps.append(step)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.window = None


@pytest.fixture
def counter(monkeypatch) -> ReadCounter:
    counter = ReadCounter()
    for name in READS:
        original = getattr(torch.Tensor, name)

        def wrapped(self, *args, _original=original, _name=name, **kwargs):
            counter.record(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, wrapped)
    return counter


@pytest.mark.parametrize("method", ["simclr", "moco", "byol", "simsiam", "tau-simclr"])
def test_no_tensor_reads_in_steps_that_do_not_log(method, tiny_config, counter):
    cfg = tiny_config(method=method, **{"train.limit_train_batches": 13, "train.progress_bar": True})
    pretrain(cfg, callbacks=[counter])
    assert len(counter.counted_steps) >= 8  # steps 1-8 and 10-11 of 13 (step 9 logs: log_every_n_steps 10)
    assert counter.reads == {}, f"{method}: host reads in steps that do not log: {counter.reads}"


def test_the_counter_sees_a_per_step_read(tiny_config, counter, monkeypatch):
    """The check itself: a method that reads its loss every step is caught."""
    from probcl.methods import simclr

    real = simclr.nt_xent_loss

    def reading_loss(*args, **kwargs):
        loss = real(*args, **kwargs)
        loss.item()
        return loss

    monkeypatch.setattr(simclr, "nt_xent_loss", reading_loss)
    pretrain(tiny_config(**{"train.limit_train_batches": 13}), callbacks=[counter])
    assert counter.reads and all(any("item" in r for r in reads) for reads in counter.reads.values())
