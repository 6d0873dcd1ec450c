"""benchmarks/paired_by_score.py on hand-made cells: two groups, three seeds, two scores; intervals from scipy."""

import json
import sys

import numpy as np
import pytest
from scipy import stats

from benchmarks.paired_by_score import main

KEY = "ood/sets.near.{}.auroc"
A = {"knn10": [0.95, 0.97, 0.96], "mahalanobis": [0.80, 0.81, 0.79]}
B = {"knn10": [0.88, 0.89, 0.90], "mahalanobis": [0.82, 0.80, 0.81]}


def _results():
    cells = [
        {"name": f"{group}-s{seed}", "group": group, "seed": seed, "error": None,
         "metrics": {KEY.format(score): values[score][seed] for score in values}}
        for group, values in (("a", A), ("b", B)) for seed in range(3)
    ]  # fmt: skip
    return {"config": {"claims": {}}, "cells": cells}


def test_each_score_gets_the_paired_and_welch_interval_of_its_difference(tmp_path, monkeypatch):
    results, out = tmp_path / "results.json", tmp_path / "out.json"
    results.write_text(json.dumps(_results()))
    argv = ["x", "--results", str(results), "--a", "a", "--b", "b", "--set", "near"]
    monkeypatch.setattr(sys, "argv", [*argv, "--scores", "knn10", "mahalanobis", "--out", str(out)])
    main()
    rows = {r["score"]: r for r in json.loads(out.read_text())["comparisons"]}
    for score in ("knn10", "mahalanobis"):
        d = np.subtract(A[score], B[score])
        half = stats.t.ppf(0.975, 2) * d.std(ddof=1) / np.sqrt(3)
        assert rows[score]["mean"] == pytest.approx(d.mean())
        assert rows[score]["paired"] == pytest.approx([d.mean() - half, d.mean() + half])
        welch = stats.ttest_ind(A[score], B[score], equal_var=False).confidence_interval(0.95)
        assert rows[score]["welch"] == pytest.approx([welch.low, welch.high])
    assert rows["knn10"]["verdict"] == "reproduced"  # differences 0.07, 0.08, 0.06: both intervals above 0
    assert rows["mahalanobis"]["verdict"] == "inconclusive at this budget"  # -0.02, +0.01, -0.02
    assert "score by score" in out.with_suffix(".md").read_text()
