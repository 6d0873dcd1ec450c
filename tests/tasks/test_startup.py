"""The start-up arithmetic of `probcl pretrain`: optimiser steps per epoch as the loader and Lightning count them,
the refusal of a batch the data cannot fill, and the warning about runs of very few steps."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DistributedSampler

from probcl.data.sources import TensorImages
from probcl.errors import ConfigError
from probcl.runs.resume import ResumableLoader
from probcl.tasks.startup import FEW_STEPS, StartupSummary, steps_per_epoch


def _images(n: int) -> TensorImages:
    return TensorImages(torch.zeros((n, 1, 2, 2), dtype=torch.uint8), None, "zeros")


@pytest.mark.parametrize("n, batch", [(28, 8), (32, 8), (31, 8), (484, 256), (1257, 32), (5, 5)])
def test_steps_per_epoch_equal_the_training_loaders_length(n, batch):
    assert steps_per_epoch(n, batch) == len(ResumableLoader(_images(n), batch, seed=0))


@pytest.mark.parametrize("n, batch, processes", [(28, 4, 2), (101, 10, 2), (1000, 32, 3), (7, 2, 3)])
def test_each_process_takes_full_batches_of_its_share(n, batch, processes):
    """The reference: torch's DistributedSampler(drop_last=True) share of each rank, in full batches."""
    share = len(DistributedSampler(range(n), num_replicas=processes, rank=0, shuffle=False, drop_last=True))
    assert steps_per_epoch(n, batch, processes) == share // batch


def test_limit_train_batches_caps_as_lightning_does():
    assert steps_per_epoch(100, 10, limit=0.25) == 2  # a fraction of the 10 batches, rounded down
    assert steps_per_epoch(100, 10, limit=4.0) == 4  # a count
    assert steps_per_epoch(100, 10, limit=50.0) == 10  # a count above the batches: all of them
    with pytest.raises(ConfigError, match=r"limit_train_batches=0.05 of the 10 batches per epoch leaves none"):
        steps_per_epoch(100, 10, limit=0.05)
    assert steps_per_epoch(100, 10, limit=1) == 1  # 1 is one batch, as Lightning reads an int (not 100 %)
    with pytest.raises(ConfigError, match=r"limit_train_batches=2.5 is neither a whole number"):
        steps_per_epoch(100, 10, limit=2.5)


def test_a_limit_of_one_trains_one_batch_an_epoch(tiny_config):
    """`train.limit_train_batches: 1` runs one optimiser step an epoch (it once ran the whole epoch, as 100 %)."""
    import json

    from probcl.core.layout import RunPaths
    from probcl.tasks.pretrain import pretrain

    run = pretrain(
        tiny_config(**{"train.limit_train_batches": 1, "train.epochs": 2, "train.monitor_every_n_epochs": 0})
    )
    rows = [json.loads(line) for line in RunPaths(run).metrics.read_text().splitlines()]
    assert sorted({row["step"] for row in rows}) == [0, 1]  # steps 0 and 1: one per epoch (a full epoch is 39)


def test_a_batch_larger_than_the_data_is_refused_with_a_batch_that_fits():
    with pytest.raises(ConfigError) as caught:
        steps_per_epoch(100, 256)
    # 100 images // 8 = 12 -> the power of two below: 8, giving 100 // 8 = 12 steps per epoch
    assert str(caught.value) == (
        "train.batch_size=256 exceeds the 100 training images: batches are always full, so no optimiser step "
        "could be taken. Lower it, e.g. --train.batch_size 8 (12 steps per epoch)"
    )
    with pytest.raises(ConfigError, match=r"exceeds the 50 training images per process \(100 in all, 2 processes\)"):
        steps_per_epoch(100, 64, processes=2)


def _summary(images: int, batch: int, epochs: int, limit: float | None = None) -> StartupSummary:
    steps, full = steps_per_epoch(images, batch, limit=limit), steps_per_epoch(images, batch)
    return StartupSummary(
        "folder:x", images, 2, 1, "", 28, "", "small: (recipe)", batch, 1, steps, full, epochs, "32-true", "cpu"
    )


def test_few_steps_warn_in_one_actionable_line():
    """Issue 29's case: 484 images at the preset's batch 256 for 2 epochs is 1 step per epoch, 2 in all."""
    warning = _summary(484, 256, 2).warning()
    assert warning is not None and "\n" not in warning
    assert "only 2 optimiser steps (1 per epoch x 2 epochs; 484 images, batch 256)" in warning
    assert "raise train.epochs to 50" in warning  # ceil(50 / 1)
    # 484 * 2 // 50 = 19 -> batch 16 would give 60 steps, but a batch below SMALLEST_SUGGESTED_BATCH (32) is another
    # recipe (fewer negatives, noisier BatchNorm), so only the epochs are suggested
    assert "batch_size" not in warning.split("too few")[1]
    # 5000 images at 256 for 2 epochs: 19 per epoch, 38 in all; 5000 * 2 // 50 = 200 -> batch 128: 39 per epoch
    assert "lower train.batch_size to 128 (39 steps per epoch)" in _summary(5000, 256, 2).warning()
    assert _summary(484, 16, 2).total_steps == 60 >= FEW_STEPS and _summary(484, 16, 2).warning() is None
    # a smoke test capped by train.limit_train_batches is the user's choice: no warning, the cap is shown
    assert _summary(484, 16, 2, limit=5).warning() is None
    assert "  steps      5 per epoch (of 30: train.limit_train_batches) x 2 epochs = 10 optimiser steps" in (
        _summary(484, 16, 2, limit=5).lines()
    )


def test_summary_lines_name_every_fact():
    lines = _summary(484, 16, 2).lines()
    assert lines[1:] == [
        "  images     484 (2 classes)",
        "  channels   1",
        "  size       28 x 28 px",
        "  augment    small: (recipe)",
        "  batch      16",
        "  steps      30 per epoch x 2 epochs = 60 optimiser steps",
        "  precision  32-true",
        "  device     cpu",
    ]


def test_the_first_step_is_timed_from_the_process_start_then_from_each_runs_call(tiny_config, capsys, monkeypatch):
    """One line per run, after its first optimiser step: the process's first run reports the process clock's reading
    (a fixed reading stands in for it: the line reports it, not a wall time); a later run in the same process (a
    benchmark's next cell) reports the seconds since its own pretrain() call, which the process clock would not."""
    import re
    import time

    import probcl.tasks.pretrain as pretrain_task

    monkeypatch.setattr(pretrain_task, "seconds_since_process_start", lambda: 1000.25)
    monkeypatch.setattr(pretrain_task.StartupClock, "first_of_process", True)
    pretrain_task.pretrain(tiny_config(**{"train.epochs": 2, "train.limit_train_batches": 2}))
    start = time.perf_counter()
    pretrain_task.pretrain(tiny_config(run_name="second", **{"train.epochs": 1, "train.limit_train_batches": 2}))
    call = time.perf_counter() - start
    lines = [line for line in capsys.readouterr().err.splitlines() if "first step" in line]
    assert len(lines) == 2
    assert re.fullmatch(r"probcl: first step began 1000\.2 s after start and took [0-9]+\.[0-9]{2} s", lines[0])
    later = re.fullmatch(r"probcl: first step began ([0-9.]+) s after this run's call and took [0-9.]+ s", lines[1])
    assert later is not None and float(later.group(1)) <= call + 0.05  # within the call (1 decimal), not the process


def test_a_folder_says_its_default_size_and_a_gray_recipe_on_colour_images_says_so():
    from probcl.config import load_config
    from probcl.tasks.startup import augment_line, size_note

    cpu = torch.device("cpu")
    folder = load_config(None, {"data": {"dataset": "folder:/photos"}})
    assert "a folder's default" in size_note(folder) and "data.image_size" in size_note(folder)
    assert size_note(load_config(None, {"data": {"dataset": "folder:/photos", "image_size": 32}})) == ""
    assert size_note(load_config(None, {})) == ""  # fashion-mnist: its native 28 px
    # the default preset, small, jitters brightness and contrast only (saturation, hue 0) and never grays a view
    line = augment_line(folder, channels=3, device=cpu)
    assert line.startswith("small: crop 0.4-1 of the area, flip 0.5, jitter 0.4/0.4/0/0")
    assert "no colour distortion on colour images: augment.preset simclr, byol, moco, ebclr-color" in line
    assert "no colour distortion" not in augment_line(folder, channels=1, device=cpu)
    simclr = load_config(None, {"data": {"dataset": "folder:/photos"}, "augment": {"preset": "simclr"}})
    assert augment_line(simclr, channels=3, device=cpu) == (
        "simclr: crop 0.08-1 of the area, flip 0.5, jitter 0.8/0.8/0.8/0.2 (brightness/contrast/saturation/hue) "
        "p 0.8, grayscale p 0.2, blur p 0.5/0.5; backend kornia (auto on cpu)"
    )


def test_the_augment_line_names_the_backend_that_makes_the_views():
    from probcl.config import load_config
    from probcl.tasks.startup import augment_line

    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    auto = load_config(None, {})
    assert augment_line(auto, channels=1, device=cpu).endswith("; backend kornia (auto on cpu)")
    assert augment_line(auto, channels=1, device=cuda).endswith("; backend device (auto on cuda)")
    for backend in ("kornia", "device"):
        chosen = load_config(None, {"augment": {"backend": backend}})
        for device in (cpu, cuda):
            assert augment_line(chosen, channels=1, device=device).endswith(f"; backend {backend}")
