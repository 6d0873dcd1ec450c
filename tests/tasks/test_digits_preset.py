"""The quick first run, `probcl pretrain --config digits/simclr` (issue #29, finding 8): its whole preset trains, and
its linear probe beats the same probe on raw pixels (the baseline any representation must pass)."""

from __future__ import annotations

import pytest

from probcl.config import load_config
from probcl.core.presets import resolve_config_path
from probcl.tasks.evaluate import EvaluateSettings, evaluate_run
from probcl.tasks.pretrain import pretrain
from probcl.tasks.startup import steps_per_epoch


@pytest.mark.slow
def test_digits_simclr_preset_beats_raw_pixels(tmp_path):
    cfg = load_config(
        resolve_config_path("digits/simclr"), {"run_dir": str(tmp_path / "run"), "train.progress_bar": False}
    )
    # full batches only (the last, partial one is dropped): 1257 // 128 = 9 per epoch, 90 in all, as the docs say
    assert cfg.data.dataset == "digits" and cfg.train.epochs * steps_per_epoch(1257, cfg.train.batch_size) == 90
    run = pretrain(cfg)
    learned = evaluate_run(run, ["linear"], EvaluateSettings(device="cpu", figures=False, report=False))["linear"][
        "top1"
    ]
    pixels = evaluate_run(
        run, ["linear"], EvaluateSettings(device="cpu", feature_layer="pixels", figures=False, report=False)
    )
    assert learned > pixels["linear@pixels"]["top1"] and learned > 95.0
