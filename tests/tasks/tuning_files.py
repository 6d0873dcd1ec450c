"""Tiny tuning files for the tuning tests (tests/tasks/test_tuning.py, test_candidates.py) and the script runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import TINY_MODEL

TINY = {
    **TINY_MODEL,
    "train.epochs": 1,
    "train.batch_size": 32,
    "train.limit_train_batches": 2,
    "train.progress_bar": False,
    "train.precision": "32-true",
    "data.train_subset": 400,
}


def write_tiny_tuning(tmp_path: Path, classes: str, near_ood: str | None) -> Path:
    """A budget and a tuning file of two methods x two trials, seconds each, on real Fashion-MNIST."""
    (tmp_path / "budget.yaml").write_text(
        yaml.safe_dump(
            {
                "overrides": {**TINY, "data.dataset": f"fashion-mnist:classes={classes}"},
                "methods": {"simclr": "fashion-mnist/simclr", "byol": "fashion-mnist/byol"},
            }
        )
    )
    heldout = {
        "fit_images": 300,
        "score_images": 200,
        **({"near_ood": near_ood, "near_ood_images": 100} if near_ood else {}),
    }
    space = {"optim.lr": {"low": 1e-4, "high": 5e-3, "why": "lr"}}
    (tmp_path / "tuning.yaml").write_text(
        yaml.safe_dump(
            {
                "title": "tiny tuning",
                "budget": "budget.yaml",
                "trials_file": "trials.yaml",
                "tuned_file": "tuned.yaml",
                "out": str(tmp_path / "runs"),
                "publish": str(tmp_path / "published"),
                "never_load_classes": [8, 9],
                "trials": 2,
                "heldout": heldout,
                "selection": {"metric": "heldout/linear_top1", "ties": ["heldout/knn_top1"], "rule": "max"},
                "methods": {"simclr": {"space": space}, "byol": {"space": space}},
            }
        )
    )
    return tmp_path / "tuning.yaml"


def run_script(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    script = root / "benchmarks" / "tune_study.py"
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, env=env, capture_output=True, text=True)
