"""The tuning file's preset controls (probcl.tasks.tuning): each tuned method run once more at its preset's own
settings, and the rule by which its winner replaces the preset's defaults (gain over the control > margin), on
hand-made trial records; and the committed study-v3 tuning file's rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tuning_files import write_tiny_tuning

from probcl.tasks.tuning import (
    CONTROL_INDEX,
    load_tuning,
    preset_verdicts,
    select,
    selection_markdown,
    trials_tree,
)

DIVERGED = "diverged"
MARGIN = 0.9


def write_controlled_tuning(tmp_path: Path) -> Path:
    """The tiny two-method, two-trial tuning file, with preset controls and one fixed override for byol."""
    path = write_tiny_tuning(tmp_path, "0-7", None)
    tree = yaml.safe_load(path.read_text())
    tree["preset_controls"] = {"margin": MARGIN, "rule": "gain over the control above the margin"}
    path.write_text(yaml.safe_dump(tree))
    return path


def write_cell(published: Path, label: str, value, lr: float | None = None) -> None:
    """One published seed-0 cell: a linear top-1, DIVERGED, or None (not run); ``lr``: its config.yaml's."""
    if value is None:
        return
    cell = published / "cells" / f"{label}-s0"
    cell.mkdir(parents=True)
    if lr is not None:
        (cell / "config.yaml").write_text(yaml.safe_dump({"optim": {"lr": lr, "name": "adam"}}))
    if value == DIVERGED:
        (cell / "cell.json").write_text(json.dumps({"error": "loss is nan"}))
        return
    (cell / "cell.json").write_text("{}")
    (cell / "eval.json").write_text(json.dumps({"heldout": {"linear_top1": value, "knn_top1": 70.0}}))


def test_the_controls_run_after_every_trial_at_the_budgets_entry_with_nothing_drawn(tmp_path):
    spec, folder = load_tuning(write_controlled_tuning(tmp_path))
    methods = trials_tree(spec, folder)["methods"]
    labels = list(methods)
    order = list(spec.methods)
    assert labels[-2:] == [f"{m}-preset" for m in order]  # after all four trials
    assert labels[:4] == [f"{m}-t{k}" for k in (0, 1) for m in order]
    assert methods["simclr-preset"] == {"config": "fashion-mnist/simclr", "overrides": {}}
    assert all("optim.lr" in methods[label]["overrides"] for label in labels[:4])


def test_without_controls_the_trials_file_has_none(tmp_path):
    spec, folder = load_tuning(write_tiny_tuning(tmp_path, "0-7", None))
    assert not any(label.endswith("-preset") for label in trials_tree(spec, folder)["methods"])


@pytest.mark.parametrize(
    ("simclr_control", "byol_control", "expected"),
    [
        # simclr's winner 86.0: 86.0 - 85.0 = 1.0 > 0.9 replaces; byol's winner 80.5: 80.5 - 79.8 = 0.7 keeps
        (85.0, 79.8, {"simclr": (1.0, True), "byol": (0.7, False)}),
        # a control better than the winner keeps the preset (a negative gain)
        (86.5, 80.5, {"simclr": (-0.5, False), "byol": (0.0, False)}),
        # a diverged control: the winner replaces it, with no gain to report
        (DIVERGED, 79.0, {"simclr": (None, True), "byol": (1.5, True)}),
        # an unfinished control gives no verdict for its method
        (None, 80.0, {"byol": (0.5, False)}),
    ],
)
def test_a_winner_replaces_its_preset_only_beyond_the_margin(tmp_path, simclr_control, byol_control, expected):
    spec, _ = load_tuning(write_controlled_tuning(tmp_path))
    published = tmp_path / "published"
    for label, value in {"simclr-t0": 85.5, "simclr-t1": 86.0, "byol-t0": 80.5, "byol-t1": 79.0}.items():
        write_cell(published, label, value)
    write_cell(published, "simclr-preset", simclr_control, lr=0.002)
    write_cell(published, "byol-preset", byol_control, lr=0.001)
    selections = select(spec, published)
    verdicts = {v.method: v for v in preset_verdicts(spec, selections)}
    assert set(verdicts) == set(expected)
    for method, (gain, replace) in expected.items():
        verdict = verdicts[method]
        assert (verdict.gain is None) == (gain is None)
        if gain is not None:
            assert verdict.gain == pytest.approx(gain)
        assert verdict.replace is replace
        winner = next(s for s in selections if s.method == method).winner
        assert winner is not None and verdict.settings == winner.settings
    simclr = next(s for s in selections if s.method == "simclr")
    assert simclr.control is not None and simclr.control.index == CONTROL_INDEX
    if simclr_control is not None:  # the control's settings are read from its run's config
        assert simclr.control.settings == {"optim.lr": 0.002}
    else:
        assert simclr.control.settings == {"optim.lr": None}
    table = selection_markdown(spec, selections)
    assert "| preset | " in table and "Preset controls: gain over the control above the margin" in table
    if byol_control == 79.8:
        assert "Winner - preset control: +0.70 (margin 0.9): within the margin: the preset keeps its settings." in table
        assert "Winner - preset control: +1.00 (margin 0.9): the preset takes the winner's settings." in table


def test_the_winner_ignores_the_control_even_when_the_control_scores_higher(tmp_path):
    spec, _ = load_tuning(write_controlled_tuning(tmp_path))
    published = tmp_path / "published"
    for label, value in {"simclr-t0": 85.5, "simclr-t1": 86.0, "simclr-preset": 99.0}.items():
        write_cell(published, label, value)
    simclr = next(s for s in select(spec, published) if s.method == "simclr")
    assert simclr.winner is not None and simclr.winner.index == 1


def test_the_study_v3_tuning_file_writes_its_control_rule_and_margin():
    spec, folder = load_tuning("fashion-mnist/study-v3-tuning")
    assert spec.preset_controls is not None and spec.preset_controls.margin == MARGIN
    methods = trials_tree(spec, folder)["methods"]
    assert [label for label in methods if label.endswith("-preset")] == [f"{m}-preset" for m in spec.methods]
