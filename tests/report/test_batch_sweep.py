"""The benchmark report's batch-size sweep: which groups form a sweep (configs equal but for batch size and
seed) and the figure drawn from their mean +- std."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import yaml

from probcl.report.benchmark_report import batch_sweep_figure, batch_sweeps
from probcl.report.document import Document


def cell(root: Path, group: str, seed: int, batch: int, lr: float = 0.002) -> dict:
    """One cell folder with a config.yaml; returns its results.json row."""
    name = f"{group}-s{seed}"
    config = {
        "method": "simclr",
        "run_dir": f"runs/study/cells/{name}",  # differs for every cell: not part of the recipe
        "init": None,
        "optim": {"name": "adam", "lr": lr},
        "train": {"epochs": 6, "batch_size": batch, "seed": seed},
    }
    (root / "cells" / name).mkdir(parents=True)
    (root / "cells" / name / "config.yaml").write_text(yaml.safe_dump(config))
    return {"name": name, "group": group, "seed": seed, "run_dir": f"cells/{name}", "error": None}


def group(mean: float, std: float | None, n: int) -> dict:
    return {"metrics": {"linear/top1": {"mean": mean, "std": std, "n": n}}}


def sweep_results(root: Path) -> dict:
    cells = [
        cell(root, "simclr", 0, 128),
        cell(root, "simclr", 1, 128),
        cell(root, "other-lr", 0, 128, lr=0.01),  # another recipe at the same batch size: no sweep of its own
        cell(root, "simclr-b16", 0, 16),
        cell(root, "simclr-b16", 1, 16),
        cell(root, "simclr-b64", 0, 64),
        cell(root, "other-lr-b16", 0, 16, lr=0.01),
        cell(root, "alone", 0, 32, lr=0.5),  # a single batch size
    ]
    groups = {
        "simclr": group(87.5, 0.1, 2),
        "other-lr": group(80.0, None, 1),
        "simclr-b16": group(87.0, 0.2, 2),
        "simclr-b64": group(87.2, None, 1),
        "other-lr-b16": group(79.0, None, 1),
        "alone": group(70.0, None, 1),
    }
    return {"cells": cells, "groups": groups}


def test_sweeps_are_groups_whose_configs_differ_only_in_batch_size(tmp_path):
    sweeps = batch_sweeps(sweep_results(tmp_path), tmp_path)
    assert sweeps == {
        "simclr": [(16, "simclr-b16"), (64, "simclr-b64"), (128, "simclr")],
        "other-lr": [(16, "other-lr-b16"), (128, "other-lr")],
    }


def test_a_failed_group_or_missing_config_is_left_out(tmp_path):
    results = sweep_results(tmp_path)
    for row in results["cells"]:
        if row["group"] == "simclr-b64":
            row["error"] = "TrainingDivergedError: loss is nan"
    (tmp_path / "cells" / "other-lr-b16-s0" / "config.yaml").unlink()
    assert batch_sweeps(results, tmp_path) == {"simclr": [(16, "simclr-b16"), (128, "simclr")]}


def test_sweep_figure_is_drawn_and_linked(tmp_path):
    doc = Document("study")
    batch_sweep_figure(doc, sweep_results(tmp_path), tmp_path)
    png = tmp_path / "plots" / "batch-sweep.png"
    assert matplotlib.image.imread(png).shape[2] in (3, 4)  # a readable image
    assert "plots/batch-sweep.png" in doc.to_markdown(tmp_path)


def test_no_sweep_no_figure(tmp_path):
    results = {"cells": [cell(tmp_path, "simclr", 0, 128)], "groups": {"simclr": group(87.5, None, 1)}}
    doc = Document("study")
    batch_sweep_figure(doc, results, tmp_path)
    assert not (tmp_path / "plots").exists()
    assert "batch-sweep" not in doc.to_markdown(tmp_path)


def test_declared_sweeps_join_arms_whose_lr_is_scaled_with_the_batch(tmp_path):
    """The EBCLR authors' protocol: lr 1e-4 at batch 16 and 64, 2e-4 at 128. Inferred, batch 128 is a recipe of its
    own (no line); declared under `sweeps`, it is the line's third point."""
    cells = [
        cell(tmp_path, "a-b16", 0, 16, lr=1e-4),
        cell(tmp_path, "a-b64", 0, 64, lr=1e-4),
        cell(tmp_path, "a-b128", 0, 128, lr=2e-4),
        cell(tmp_path, "simclr", 0, 128),
    ]
    groups = {g: group(80.0 + i, None, 1) for i, g in enumerate(["a-b16", "a-b64", "a-b128", "simclr"])}
    results = {"cells": cells, "groups": groups}
    assert batch_sweeps(results, tmp_path) == {"a-b16": [(16, "a-b16"), (64, "a-b64")]}
    results["config"] = {"sweeps": {"authors' optimiser": ["a-b128", "a-b16", "a-b64"], "one point": ["simclr"]}}
    assert batch_sweeps(results, tmp_path) == {"authors' optimiser": [(16, "a-b16"), (64, "a-b64"), (128, "a-b128")]}
