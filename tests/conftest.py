"""Shared fixtures: tiny configs and runs on real (small) data, so tests stay fast on 2 CPU cores."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("PROBCL_NO_PROGRESS", "1")


# the tiny model of every fast test: a 4-channel CNN with a 16 -> 8 projection head
TINY_MODEL = {"model.backbone": "cnn", "model.width": 4, "model.proj_hidden": 16, "model.proj_out": 8}


def tiny_overrides(run_dir, **extra) -> dict:
    """Dotted overrides for a seconds-long run on scikit-learn's digits (28x28, 1257 train images)."""
    overrides = {
        "run_dir": str(run_dir),
        "data.dataset": "digits",
        **TINY_MODEL,
        "train.epochs": 1,
        "train.batch_size": 32,
        "train.limit_train_batches": 4,
        "train.monitor_train_samples": 300,
        "train.monitor_test_samples": 200,
        "train.progress_bar": False,
        # float32 on every machine (the default, auto, is bf16 where the CPU computes it natively): tests compare
        # with float32 references; bf16 has its own tests (tests/methods/test_bf16.py, tests/runs/test_resume.py)
        "train.precision": "32-true",
    }
    overrides.update(extra)
    return overrides


@pytest.fixture
def tiny_config(tmp_path):
    """Factory: ``tiny_config(method="simclr", **dotted_overrides)`` -> validated Config."""
    from probcl.config import load_config

    def make(method: str = "simclr", run_name: str = "run", **extra):
        overrides = tiny_overrides(tmp_path / run_name, method=method, **extra)
        return load_config(None, overrides)

    return make


WALL_CLOCK_KEYS = ("monitor/seconds", "monitor/share")  # metrics that measure time, not training


def reproducible_rows(metrics_jsonl: str) -> list[dict]:
    """metrics.jsonl rows without the wall-clock fields, for comparing two runs of one seed."""
    rows = [json.loads(line) for line in metrics_jsonl.splitlines()]
    return [{k: v for k, v in row.items() if k not in WALL_CLOCK_KEYS} for row in rows]
