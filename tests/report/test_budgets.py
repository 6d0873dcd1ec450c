"""Verdicts at several budgets side by side (probcl.report.budgets), on two hand-made results.json fixtures.

tests/report/fixtures/budgets/{short,long}/results.json: SimCLR and EBCLR, 3 seeds; per seed, EBCLR - SimCLR is
    linear top-1: short 1, 2, 3 (mean 2)  long 3, 4, 5 (mean 4)
    kNN top-1:    short -4, -3, -2 (-3)   long -6, -5, -4 (-5)
so each budget's sample std is 1 and its 95 % half-width t(0.975, 2) / sqrt(3) = 4.3027 / 1.7321 = 2.4841:
    linear: short [-0.484, +4.48] includes 0 -> inconclusive; long [+1.52, +6.48] -> reproduced: it moves;
    kNN: short [-5.48, -0.516], long [-7.48, -2.52], both below 0 -> contradicted: it does not move.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from probcl.core.io import read_json
from probcl.report.budgets import (
    NO_DATA,
    NOT_PLANNED,
    NOT_RUN,
    Budget,
    budget_figure,
    budget_table,
    budgets_section,
    moved,
    provisional,
    shown_verdict,
)
from probcl.report.document import Document

FIXTURES = Path(__file__).parent / "fixtures" / "budgets"
SHORT, LONG = read_json(FIXTURES / "short" / "results.json"), read_json(FIXTURES / "long" / "results.json")
CLAIMS = SHORT["config"]["claims"]


def budget(label: str, results: dict | None, planned: int = 6, seeds: dict[str, int] | None = None) -> Budget:
    """A budget of the fixtures' claims; ``seeds``: its plan per group (None: unknown, so every claim is planned)."""
    return Budget(label, results, planned, CLAIMS, f"docs/results/{label}", seeds or {})


def first_seed(results: dict) -> dict:
    return {**results, "cells": [c for c in results["cells"] if c["seed"] == 0]}


def rows(budgets: list[Budget]) -> list[list[str]]:
    doc = Document("t")
    budget_table(doc, budgets)
    return [
        [cell.strip() for cell in line.strip("|").split("|")] for line in doc.to_markdown(Path(".")).splitlines()[4:]
    ]


SHORT_LINEAR = (
    "+2 points, paired [-0.484, +4.48], Welch [-0.484, +4.48]; the comparator is one number in every seed (80)"
)
LONG_LINEAR = "+4 points, paired [+1.52, +6.48], Welch [+1.52, +6.48]; the comparator is one number in every seed (85)"
SHORT_KNN = "-3 points, paired [-5.48, -0.516], Welch [-5.48, -0.516]; the comparator is one number in every seed (70)"


def test_one_claim_moves_with_budget_and_one_does_not():
    # SimCLR is one number in every seed of the fixtures, so the Welch interval is EBCLR's own, the paired one
    linear, knn = rows([budget("short", SHORT), budget("long", LONG)])
    assert linear == [
        "EBCLR: Higher linear accuracy than SimCLR.",
        "**inconclusive at this budget**",
        "**reproduced**",
        "EBCLR - SimCLR, linear top-1",
        f"{SHORT_LINEAR}: inconclusive at this budget",
        f"{LONG_LINEAR}: reproduced",
        "yes: inconclusive at this budget → reproduced",
    ]
    assert knn == [
        "EBCLR: Higher kNN accuracy than SimCLR.",
        "**contradicted**",
        "**contradicted**",
        "EBCLR - SimCLR, kNN top-1",
        f"{SHORT_KNN}: contradicted",
        "-5 points, paired [-7.48, -2.52], Welch [-7.48, -2.52]; the comparator is one number in every seed (75): "
        "contradicted",
        "no",
    ]


def test_the_budgets_are_compared_on_the_same_comparison():
    """One claim of both comparisons. Short budget: EBCLR's kNN lowered by 10 (differences -14, -13, -12: kNN
    contradicted decides; linear +1, +2, +3 inconclusive). Long: kNN raised by 10 (+4, +5, +6: reproduced) and linear
    lowered by 3 (0, +1, +2: inconclusive, deciding). The row reads linear at both budgets (the comparison deciding
    at the last one), names kNN where it decides instead, and linear did not move although the claim's verdict did."""
    both = {"ebclr": {"paper": "EBCLR", "statement": "both", "paper_numbers": "n",
                      "comparisons": [c for claim in CLAIMS.values() for c in claim["comparisons"]]}}  # fmt: skip

    def moved_by(results: dict, knn: float, linear: float) -> dict:
        shift = {"knn/top1": knn, "linear/top1": linear}
        cells = [
            {**c, "metrics": {k: v + shift.get(k, 0.0) for k, v in c["metrics"].items()}}
            if c["group"] == "ebclr"
            else c
            for c in results["cells"]
        ]
        return {**results, "cells": cells, "config": {**results["config"], "claims": both}}

    budgets = [Budget("short", moved_by(SHORT, -10, 0), 6), Budget("long", moved_by(LONG, 10, -3), 6)]
    doc = Document("t")
    budget_table(doc, budgets)
    row = [cell.strip() for cell in doc.to_markdown(Path(".")).splitlines()[4].strip("|").split("|")]
    assert row[1:4] == ["**contradicted**", "**inconclusive at this budget**", "EBCLR - SimCLR, linear top-1"]
    assert row[4].startswith("+2 points, paired [") and row[4].endswith(": contradicted)")
    assert ": inconclusive at this budget (the claim is decided here by EBCLR - SimCLR, kNN top-1: -13 points" in row[4]
    assert row[5].startswith("+1 points, paired [") and row[5].endswith(": inconclusive at this budget")
    assert row[6] == "no"  # linear's verdicts; the claim's (kNN's, then linear's) moved


def test_a_budget_without_cells_shows_as_not_run_and_a_partial_one_as_partial():
    missing, partial = budget("long", None, planned=24), budget("short", first_seed(SHORT))
    assert missing.status == "not run yet: 0 of 24 cells" and partial.status == "2 of 6 cells"
    linear, knn = rows([partial, missing])
    # seed 0 alone: EBCLR - SimCLR = +1 linear, -4 kNN; one seed gives no interval, so no verdict either way
    assert linear[1:] == [
        "**inconclusive at this budget**",
        NOT_RUN,
        "EBCLR - SimCLR, linear top-1",
        "+1 points (one seed: no interval): inconclusive at this budget",
        "—",
        "—",
    ]
    assert knn[1:] == [
        "**inconclusive at this budget**",
        NOT_RUN,
        "EBCLR - SimCLR, kNN top-1",
        "-4 points (one seed: no interval): inconclusive at this budget",
        "—",
        "—",
    ]
    doc = Document("t")
    budget_table(doc, [partial, missing])
    header = doc.to_markdown(Path(".")).splitlines()[2]
    assert "verdict at short (2 of 6 cells)" in header and "verdict at long (not run yet: 0 of 24 cells)" in header


def test_a_claim_a_budget_does_not_plan_or_has_no_data_for_yet():
    result = budget("short", SHORT).judged()["ebclr-linear"]
    simclr_only = budget("long", {**LONG, "cells": [c for c in LONG["cells"] if c["group"] == "simclr"]})
    assert shown_verdict(simclr_only, simclr_only.judged()["ebclr-linear"]) == NO_DATA  # planned, not trained yet
    assert shown_verdict(budget("long", LONG, seeds={"simclr": 3}), result) == NOT_PLANNED
    assert shown_verdict(budget("long", LONG), None) == NOT_PLANNED  # the budget's claims lack it


@pytest.mark.parametrize(
    "verdicts, expected",
    [
        (["reproduced", "reproduced"], "no"),
        (["contradicted", "inconclusive at this budget"], "yes: contradicted → inconclusive at this budget"),
        (["reproduced", NOT_RUN], "—"),
        ([NO_DATA, NOT_PLANNED], "—"),
    ],
)
def test_moved(verdicts, expected):
    assert moved(verdicts) == expected


def test_a_one_seed_verdict_does_not_count_as_moved():
    # One seed has no interval, so its "inconclusive" says nothing yet about whether the verdict moved.
    verdicts = ["contradicted", "inconclusive at this budget"]
    assert moved(verdicts, ["4,680 steps"]) == "not yet: one seed at 4,680 steps"
    assert moved(["reproduced", NOT_RUN], ["4,680 steps"]) == "—"
    # in the table: the short budget's kNN is contradicted on 3 seeds, the long one's single seed is inconclusive
    linear, knn = rows([budget("short", SHORT), budget("long", first_seed(LONG))])
    assert knn[1:3] == ["**contradicted**", "**inconclusive at this budget**"] and knn[5].startswith(
        "-6 points (one seed"
    )
    assert linear[-1] == knn[-1] == "not yet: one seed at long"


def test_the_verdict_vs_budget_figure_and_section(tmp_path):
    budgets = [budget("short", SHORT), budget("long", LONG), budget("longer", None)]
    assert budget_figure([budget("long", None)], tmp_path / "none.png") is None  # nothing to draw yet
    doc = Document("t")
    budgets_section(doc, budgets, tmp_path / "plots")
    md = doc.to_markdown(tmp_path)
    assert (tmp_path / "plots" / "verdict-vs-budget.png").stat().st_size > 10_000
    assert "![Verdict vs budget" in md and "longer: docs/results/longer (not run yet: 0 of 6 cells)" in md


def test_a_verdict_on_fewer_seeds_or_comparisons_than_planned_is_marked_provisional():
    """The fixtures have 3 seeds per arm. Planned 3: the verdicts stand. Planned 6 (a budget whose extra seeds were
    cut or have not run): the same verdicts are provisional, with the count. A claim of two comparisons, one of
    whose arms has no cells yet, is provisional for the missing one (its verdict could lower the claim's)."""
    planned = {"simclr": 3, "ebclr": 3}
    linear, knn = rows([Budget("long", LONG, 6, CLAIMS, "x", planned)])
    assert linear[1] == "**reproduced**" and knn[1] == "**contradicted**"
    linear, knn = rows([Budget("long", LONG, 12, CLAIMS, "x", {"simclr": 6, "ebclr": 6})])
    assert linear[1] == "**reproduced** (provisional: 3 of 6 planned seeds)"
    assert knn[1] == "**contradicted** (provisional: 3 of 6 planned seeds)"
    vs_simclr = CLAIMS["ebclr-linear"]["comparisons"][0]
    vs_moco = {
        "label": "EBCLR - MoCo, linear top-1",
        "value": {"minus": [{"metric": ["ebclr", "linear/top1"]}, {"metric": ["moco", "linear/top1"]}]},
    }
    two = {"two": {"paper": "EBCLR", "statement": "two", "paper_numbers": "n",
                   "comparisons": [vs_simclr, vs_moco]}}  # fmt: skip
    groups = {"simclr": 3, "ebclr": 3, "moco": 3}
    (row,) = rows([Budget("long", {**LONG, "config": {**LONG["config"], "claims": two}}, 9, two, "x", groups)])
    assert row[1] == "**reproduced** (provisional: 1 of 2 comparisons without data yet)"
    assert provisional(Budget("long", LONG, 6, CLAIMS, "x"), None) == ""  # no plan known: no mark


def test_a_seed_compared_while_one_of_its_arms_is_still_to_run_is_marked_provisional():
    """EBCLR - the best of SimCLR and MoCo, where MoCo (linear 90, above SimCLR's 85) has run seed 0 only: seeds 1
    and 2 are compared with SimCLR alone, a weaker comparator than they will have (differences 88 - 90 = -2 at
    seed 0, then 89 - 85 = +4 and 90 - 85 = +5). With MoCo planned for 3 seeds that is provisional; planned for 1,
    the comparison is what it will be."""
    best = {
        "label": "EBCLR - best of SimCLR and MoCo, linear top-1",
        "value": {"minus": [{"metric": ["ebclr", "linear/top1"]},
                            {"best": [{"metric": ["simclr", "linear/top1"]}, {"metric": ["moco", "linear/top1"]}]}]},
    }  # fmt: skip
    claims = {"best": {"paper": "EBCLR", "statement": "best", "paper_numbers": "n", "comparisons": [best]}}
    moco = {"name": "moco-s0", "group": "moco", "method": "moco", "seed": 0, "error": None,
            "metrics": {"linear/top1": 90.0}}  # fmt: skip
    results = {**LONG, "config": {**LONG["config"], "claims": claims}, "cells": [*LONG["cells"], moco]}
    for moco_seeds, mark in ((3, " (provisional: seeds 1, 2 without every arm yet)"), (1, "")):
        planned = {"simclr": 3, "ebclr": 3, "moco": moco_seeds}
        judged = Budget("long", results, 7, claims, "x", planned)
        result = judged.judged()["best"]
        assert result.comparisons[0].differences == pytest.approx([-2.0, 4.0, 5.0])
        (row,) = rows([judged])
        assert row[1] == f"**{result.verdict}**{mark}"
