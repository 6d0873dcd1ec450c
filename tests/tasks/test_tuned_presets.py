"""Study v3's preset rule, applied: each Fashion-MNIST preset holds the winner's tuned settings where the winner beat
the preset's own settings by more than the committed margin, else the settings its preset control ran with
(``preset_controls`` of docs/results/study-v3-tuning/selection.json, written by ``benchmarks/tune_study.py report``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probcl.config import load_config
from probcl.core.presets import resolve_config_path
from probcl.core.typed_config import dotted, to_plain
from probcl.tasks.tuning import load_tuning

ROOT = Path(__file__).resolve().parents[2]
PRESET_CONTROLS = json.loads((ROOT / "docs/results/study-v3-tuning/selection.json").read_text())["preset_controls"]
VERDICTS = PRESET_CONTROLS["verdicts"]


def test_every_tuned_method_has_a_verdict():
    spec, _ = load_tuning("fashion-mnist/study-v3-tuning")
    assert set(VERDICTS) == set(spec.methods)


@pytest.mark.parametrize("method", sorted(VERDICTS))
def test_each_fashion_mnist_preset_holds_the_settings_its_preset_control_chose(method):
    verdict = VERDICTS[method]
    chosen = verdict["settings"] if verdict["replace"] else PRESET_CONTROLS["controls"][method]["settings"]
    config = dotted(to_plain(load_config(resolve_config_path(f"fashion-mnist/{method}"))))
    for key, value in chosen.items():
        # the presets write the winners' values as the trials file does, to 3 significant digits
        assert config[key] == pytest.approx(value, rel=1e-2), (
            f"fashion-mnist/{method}.yaml: {key} is {config[key]}, study v3's preset rule chose {value} "
            f"({'the winner' if verdict['replace'] else 'the preset control'}; docs/results/study-v3-tuning)"
        )
