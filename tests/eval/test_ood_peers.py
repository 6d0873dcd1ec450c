"""benchmarks/ood_peers.py's metrics: FPR95 both ways, by hand."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def peers():
    sys.path.insert(0, str(BENCHMARKS))  # the script imports its sibling `common`
    try:
        spec = importlib.util.spec_from_file_location("ood_peers", BENCHMARKS / "ood_peers.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def test_fpr95_both_ways_by_hand(peers):
    id_scores = torch.arange(20, dtype=torch.float64)  # 0..19: 95 % of ID accepted at t = 18
    ood_scores = torch.tensor([5.0, 18.0, 19.0, 30.0] + [40.0] * 16)  # 95 % of OOD flagged at >= 18
    got = peers.metrics(id_scores, ood_scores)
    assert got["fpr95_id"] == pytest.approx(2 / 20)  # OOD accepted (<= 18): 5 and 18
    assert got["fpr95_ood"] == pytest.approx(2 / 20)  # ID flagged (>= 18) when 19 of 20 OOD are: 18 and 19
    # pairs an OOD score loses (a tie: half): 5 loses to 6..19 and ties 5; 18 loses to 19, ties 18; 19 ties 19
    assert got["auroc"] == pytest.approx(1 - (14.5 + 1.5 + 0.5) / 400)
