"""Between logging steps the training loop reads nothing back from the device (a GPU never waits for the host).

On CPU a host-device synchronisation is free, so it is counted instead: every Python-level read of a tensor's
value (``item``, ``tolist``, ``cpu``, ``numpy``, ``bool``/``int``/``float`` of a tensor) made by any code but torch's
own (probcl, Lightning, kornia's augmentations) during a training step that does not log is a failure. Reads inside
torch itself (e.g. Adam's step counter, a CPU tensor on every device) are not probcl's to remove and are not
counted.

VEM-Langevin and VEM-SVGD read nothing either (the SVGD bandwidth stays on the device, the bank's fill count is
mirrored on the host). C-SimCLR and C-BYOL read once per vMF draw: the rejection sampler checks whether every
element has accepted one of its 8 proposals (a data-dependent loop; two draws a step). EBCLR reads by design and
is not listed: its divergence stops (the SGLD chain's gradient norm, the energies, the parameter-gradient norm)
act before the step's update is applied.

The views: on a CPU, ``augment.backend: auto`` runs kornia's colour jitter, whose reads are known and left
(:data:`KORNIA_KNOWN`); the device backend, auto's choice on CUDA, reads nothing on five recipes (colour jitter
on gray and colour images, grayscale, blur, solarisation, noise), counted with no exception.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from probcl.tasks.pretrain import pretrain

READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__")
TORCH = str(Path(torch.__file__).parent)
# Reads that are known and left, each with why: kornia's ColorJitter dispatcher reads `params["order"].tolist()`
# and a Python `.any()` guard per colour step (5 reads a view). Only the kornia backend has them, which is what
# `augment.backend: auto` runs on a CPU (there a read costs nothing, and kornia keeps CPU runs bit-identical to
# the published ones); the device backend (probcl/data/intensity.py), auto's choice on CUDA, reads nothing.
KORNIA_KNOWN = ("kornia/augmentation/_2d/intensity/color_jiggle.py",)


class ReadCounter(Callback):
    """Counts tensor reads by code outside torch from the start of one batch to the start of the next, for the
    batches whose step does not log (not the first, warm-up step, nor the last, which ends the epoch); reads made
    by the files ending in ``known`` are not counted."""

    def __init__(self, known: tuple[str, ...] = KORNIA_KNOWN) -> None:
        self.known = known
        self.window: int | None = None  # the step whose window is open, when it is counted
        self.reads: dict[int, list[str]] = {}
        self.counted_steps: list[int] = []

    def record(self, name: str) -> None:
        if self.window is None:
            return
        caller = sys._getframe(2)
        where = caller.f_code.co_filename
        if not where.startswith(TORCH) and not where.endswith(self.known):
            self.reads.setdefault(self.window, []).append(f"{name} at {where}:{caller.f_lineno}")

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


@pytest.mark.parametrize(
    "method", ["simclr", "moco", "byol", "simsiam", "tau-simclr", "vem-langevin", "vem-svgd", "simclr-pred"]
)
def test_no_tensor_reads_in_steps_that_do_not_log(method, tiny_config, counter):
    # SVGD's RBF kernel is bank x bank: a 512-feature bank runs the same code as the default 4,096 at 1/64 the cost
    small_bank = {"method_args.bank_size": 512} if method == "vem-svgd" else {}
    cfg = tiny_config(method=method, **{"train.limit_train_batches": 13, "train.progress_bar": True, **small_bank})
    pretrain(cfg, callbacks=[counter])
    assert len(counter.counted_steps) >= 8  # steps 1-8 and 10-11 of 13 (step 9 logs: log_every_n_steps 10)
    assert counter.reads == {}, f"{method}: host reads in steps that do not log: {counter.reads}"


@pytest.mark.parametrize("method", ["c-simclr", "c-byol"])
def test_vmf_methods_read_once_per_draw(method, tiny_config, counter):
    cfg = tiny_config(method=method, **{"train.limit_train_batches": 13})
    pretrain(cfg, callbacks=[counter])
    assert len(counter.counted_steps) >= 8
    where = [r.split(" at ")[1].rsplit(":", 1)[0] for reads in counter.reads.values() for r in reads]
    assert {Path(w).name for w in where} <= {"vmf.py"}, where
    # two vMF draws a step (one per view), each ending on its one `pending.any()` read after a round of proposals
    assert max(len(reads) for reads in counter.reads.values()) <= 2 * 2, counter.reads


def test_the_counter_sees_a_per_step_read(tiny_config, counter, monkeypatch):
    """The check itself: a method that reads its loss every step is caught."""
    from probcl.methods import simclr

    real = simclr.simclr_loss

    def reading_loss(*args, **kwargs):
        loss = real(*args, **kwargs)
        loss.item()
        return loss

    monkeypatch.setattr(simclr, "simclr_loss", reading_loss)
    pretrain(tiny_config(**{"train.limit_train_batches": 13}), callbacks=[counter])
    assert counter.reads and all(any("item" in r for r in reads) for reads in counter.reads.values())


# The views' recipes with a random step after the crop, on the images they are for: small (the fashion-mnist
# presets': brightness and contrast jitter), simclr (colour jitter with saturation and hue, grayscale, blur), byol
# (blur always on view 1, solarize on view 2), ebclr-color (blur and noise), ebclr-gray (noise only).
VIEW_RECIPES = [("small", 1), ("simclr", 3), ("byol", 3), ("ebclr-color", 3), ("ebclr-gray", 1)]


@pytest.mark.parametrize("preset, channels", VIEW_RECIPES)
def test_device_views_read_nothing(preset, channels, tiny_config, counter):
    """augment.backend device (auto's choice on CUDA), forced on the CPU: no read at all, kornia's included."""
    counter.known = ()
    cfg = tiny_config(
        **{
            "train.limit_train_batches": 13,
            "augment.preset": preset,
            "augment.backend": "device",
            "data.channels": channels,
        }
    )
    pretrain(cfg, callbacks=[counter])
    assert len(counter.counted_steps) >= 8
    assert counter.reads == {}, f"{preset}: host reads in steps that do not log: {counter.reads}"
