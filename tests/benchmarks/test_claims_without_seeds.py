"""benchmarks/claims_without_seeds.py on the hand-made budget fixture (tests/report/fixtures/budgets/short).

Per seed, EBCLR - SimCLR linear top-1 is +1, +2, +3 (SimCLR one number, 80, in every seed):
- all seeds: mean +2, sd 1, t(0.975, 2) = 4.3027, interval +2 -/+ 4.3027 / sqrt(3) = [-0.484, +4.48];
- without seed 0: +2, +3, mean +2.5, sd 0.7071, t(0.975, 1) = 12.706, half-width 12.706 * 0.7071 / sqrt(2) = 6.353,
  so [-3.85, +8.85]; both inconclusive, the second wider.
"""

import json
import sys
from pathlib import Path

import pytest

from benchmarks.claims_without_seeds import main, without_seeds

SHORT = Path(__file__).parents[1] / "report" / "fixtures" / "budgets" / "short" / "results.json"


def test_without_seeds_drops_only_those_seeds_cells():
    results = json.loads(SHORT.read_text())
    kept = without_seeds(results, {0})
    assert {c["seed"] for c in kept["cells"]} == {1, 2}
    assert len(kept["cells"]) == len(results["cells"]) - sum(c["seed"] == 0 for c in results["cells"])


def test_the_claim_is_judged_with_and_without_the_seed(tmp_path, monkeypatch):
    out = tmp_path / "out.json"
    argv = ["x", "--results", str(SHORT), "--drop-seeds", "0", "--claims", "ebclr-linear", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    main()
    (row,) = json.loads(out.read_text())["claims"]
    every, kept = row["all seeds"]["deciding"], row["without"]["deciding"]
    assert every["seeds"] == [0, 1, 2] and kept["seeds"] == [1, 2]
    assert every["mean"] == pytest.approx(2.0) and kept["mean"] == pytest.approx(2.5)
    assert every["paired"] == pytest.approx([2 - 4.302653 / 3**0.5, 2 + 4.302653 / 3**0.5], abs=1e-4)
    assert kept["paired"] == pytest.approx([2.5 - 6.35310, 2.5 + 6.35310], abs=1e-4)
    assert row["all seeds"]["verdict"] == row["without"]["verdict"] == "inconclusive at this budget"
    assert "without seed 0" in out.with_suffix(".md").read_text()
