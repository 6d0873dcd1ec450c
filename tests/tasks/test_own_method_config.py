"""Issue 45's winner, transcribed: the study's own-method cells train exactly the development split's winning trial
(docs/results/dev-tuning/selection.json), with only the study's data and monitor in place of the development
split's, and the method's preset holds the same settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from probcl.config import load_config
from probcl.core.presets import resolve_config_path
from probcl.core.typed_config import dotted, to_plain
from probcl.tasks.benchmark.grid import cell_config, grid, load_benchmark

ROOT = Path(__file__).resolve().parents[2]
SELECTION = json.loads((ROOT / "docs/results/dev-tuning/selection.json").read_text())
WINNER = SELECTION["candidates"]["winner"]
TRIAL = SELECTION["candidates"]["chosen"][WINNER]["trial"]
# what a confirmation cell may change: the study's classes 0-7 (development: 0-5), its run folder, and the online
# monitor every study cell trains with (the development trials run without it)
STUDY_ONLY = {"data.dataset", "run_dir", "train.monitor_every_n_epochs"}


def _cell(config: str, label: str, tmp_path: Path) -> dict[str, Any]:
    bench, path = load_benchmark(config)
    (cell,) = [c for c in grid(bench) if c.method == label and c.seed == 0]
    return dotted(to_plain(cell_config(bench, cell, tmp_path, path.parent)))


def test_the_winner_is_simclr_pred_trial_1():
    assert (WINNER, TRIAL) == ("simclr-pred", 1)  # the rule's outcome, committed before any confirmation cell


@pytest.mark.parametrize(
    "study",
    [
        "fashion-mnist/study-v3",
        "fashion-mnist/study-v3-long",
        "fashion-mnist/study-v3-split2",
        "fashion-mnist/study-v3-split2-long",
    ],
)
def test_each_confirmation_cell_trains_the_winning_trial(study, tmp_path):
    trial = _cell("fashion-mnist/dev-tuning-trials", f"{WINNER}-t{TRIAL}", tmp_path)
    cell = _cell(study, WINNER, tmp_path)
    differing = {k for k in set(trial) | set(cell) if trial.get(k) != cell.get(k)}
    if study.endswith("-long"):  # the long budgets: 5x the epochs, as for every method there
        assert cell["train.epochs"] == 5 * trial["train.epochs"]
        differing.discard("train.epochs")
    assert differing <= STUDY_ONLY, {k: (trial.get(k), cell.get(k)) for k in differing - STUDY_ONLY}


def test_the_methods_preset_holds_the_winners_settings():
    bench, _ = load_benchmark("fashion-mnist/dev-tuning-trials")
    settings = bench.methods[f"{WINNER}-t{TRIAL}"]["overrides"]
    preset = dotted(to_plain(load_config(resolve_config_path(f"fashion-mnist/{WINNER}"))))
    for key, value in settings.items():
        assert preset[key] == pytest.approx(value, rel=1e-2), key
