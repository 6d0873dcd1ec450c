"""benchmarks/claims_across_studies.py on hand-made studies of the budget fixture's claim (EBCLR - SimCLR linear
top-1, SimCLR one number, 80, in every seed; reproduced when both intervals lie above 0).

- before: seeds 0-1, differences +1, +3: mean 2, sd 1.414, t(0.975, 1) = 12.706, half-width 12.706 * 1.414 / sqrt(2)
  = 12.71: [-10.7, +14.7], inconclusive;
- after, the seeds move it: seeds 0-3, +1, +3, +2, +2: mean 2, sd 0.8165, t(0.975, 3) = 3.1824, half-width
  3.18245 * 0.81650 / 2 = 1.2992: [+0.70, +3.30], reproduced; on seeds 0-1 alone it is the before's, inconclusive;
- after, the cells move it: +2, +2.2, +2.1, +1.9: on seeds 0-1 alone mean 2.1, sd 0.1414, half-width 1.27:
  [+0.83, +3.37], already reproduced.
"""

import copy
import json
import sys
from pathlib import Path

import pytest

from benchmarks.claims_across_studies import compare, main, only_seeds

SHORT = json.loads(
    (Path(__file__).parents[1] / "report" / "fixtures" / "budgets" / "short" / "results.json").read_text()
)


def study(differences: list[float]) -> dict:
    """The fixture's claims over cells whose EBCLR - SimCLR linear top-1 is ``differences[seed]``."""
    results = copy.deepcopy(SHORT)
    results["config"]["claims"] = {"ebclr-linear": results["config"]["claims"]["ebclr-linear"]}
    results["cells"] = [
        {"name": f"{group}-s{seed}", "group": group, "method": group, "seed": seed, "error": None,
         "metrics": {"linear/top1": 80.0 + (d if group == "ebclr" else 0.0)}}
        for seed, d in enumerate(differences) for group in ("simclr", "ebclr")
    ]  # fmt: skip
    return results


def test_only_seeds_keeps_those_seeds_cells():
    assert {c["seed"] for c in only_seeds(study([1, 3, 2, 2]), {0, 1})["cells"]} == {0, 1}


def test_a_verdict_the_added_seeds_moved():
    (row,) = compare(study([1, 3]), study([1, 3, 2, 2]))
    assert row["before"]["verdict"] == row["after_before_seeds"]["verdict"] == "inconclusive at this budget"
    assert row["before"]["paired_only"] == "inconclusive at this budget"
    assert row["after"]["verdict"] == "reproduced"
    assert row["after"]["deciding"]["paired"] == pytest.approx([2 - 1.29923, 2 + 1.29923], abs=1e-4)
    assert row["before"]["deciding"]["paired"] == pytest.approx([2 - 12.7062, 2 + 12.7062], abs=1e-3)
    assert row["moved"] and row["moved_by_the_seeds"]


def test_a_verdict_the_later_cells_moved_at_the_same_seeds(tmp_path, monkeypatch):
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps(study([1, 3])))
    after.write_text(json.dumps(study([2, 2.2, 2.1, 1.9])))
    out = tmp_path / "out.json"
    monkeypatch.setattr(sys, "argv", ["x", "--before", str(before), "--after", str(after), "--out", str(out)])
    main()
    (row,) = json.loads(out.read_text())["claims"]
    assert row["after_before_seeds"]["verdict"] == "reproduced" and row["after_before_seeds"]["deciding"]["seeds"] == [
        0,
        1,
    ]
    assert row["after_before_seeds"]["deciding"]["paired"] == pytest.approx([2.1 - 1.27062, 2.1 + 1.27062], abs=1e-4)
    assert row["moved"] and not row["moved_by_the_seeds"]
    assert "| ebclr-linear |" in out.with_suffix(".md").read_text()


def test_again_recomputes_a_written_file_from_the_studies_it_names(tmp_path, monkeypatch):
    before, after, out = tmp_path / "before.json", tmp_path / "after.json", tmp_path / "out.json"
    before.write_text(json.dumps(study([1, 3])))
    after.write_text(json.dumps(study([1, 3])))  # first written with the after equal to the before: inconclusive
    monkeypatch.setattr(sys, "argv", ["x", "--before", str(before), "--after", str(after), "--out", str(out)])
    main()
    assert json.loads(out.read_text())["claims"][0]["after"]["verdict"] == "inconclusive at this budget"
    after.write_text(json.dumps(study([1, 3, 2, 2])))  # two seeds land
    monkeypatch.setattr(sys, "argv", ["x", "--again", str(out)])
    main()
    recomputed = json.loads(out.read_text())
    assert (recomputed["before"], recomputed["after"]) == (str(before), str(after))
    assert recomputed["claims"][0]["after"]["verdict"] == "reproduced"  # [+0.70, +3.30], the docstring's case
