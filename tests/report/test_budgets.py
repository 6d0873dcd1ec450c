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
    shown_verdict,
)
from probcl.report.document import Document

FIXTURES = Path(__file__).parent / "fixtures" / "budgets"
SHORT, LONG = read_json(FIXTURES / "short" / "results.json"), read_json(FIXTURES / "long" / "results.json")
CLAIMS = SHORT["config"]["claims"]
GROUPS = frozenset({"simclr", "ebclr"})


def budget(label: str, results: dict | None, planned: int = 6, groups: frozenset[str] = GROUPS) -> Budget:
    return Budget(label, results, planned, groups, CLAIMS, f"docs/results/{label}")


def first_seed(results: dict) -> dict:
    return {**results, "cells": [c for c in results["cells"] if c["seed"] == 0]}


def rows(budgets: list[Budget]) -> list[list[str]]:
    doc = Document("t")
    budget_table(doc, budgets)
    return [
        [cell.strip() for cell in line.strip("|").split("|")] for line in doc.to_markdown(Path(".")).splitlines()[4:]
    ]


def test_one_claim_moves_with_budget_and_one_does_not():
    linear, knn = rows([budget("short", SHORT), budget("long", LONG)])
    assert linear == [
        "EBCLR: Higher linear accuracy than SimCLR.",
        "**inconclusive at this budget**",
        "**reproduced**",
        "EBCLR - SimCLR, linear top-1: +2 [-0.484, +4.48] points",
        "EBCLR - SimCLR, linear top-1: +4 [+1.52, +6.48] points",
        "yes: inconclusive at this budget → reproduced",
    ]
    assert knn == [
        "EBCLR: Higher kNN accuracy than SimCLR.",
        "**contradicted**",
        "**contradicted**",
        "EBCLR - SimCLR, kNN top-1: -3 [-5.48, -0.516] points",
        "EBCLR - SimCLR, kNN top-1: -5 [-7.48, -2.52] points",
        "no",
    ]


def test_a_budget_without_cells_shows_as_not_run_and_a_partial_one_as_partial():
    missing, partial = budget("long", None, planned=24), budget("short", first_seed(SHORT))
    assert missing.status == "not run yet: 0 of 24 cells" and partial.status == "2 of 6 cells"
    linear, knn = rows([partial, missing])
    # seed 0 alone: EBCLR - SimCLR = +1 linear, -4 kNN; one seed gives no interval, so no verdict either way
    assert linear[1:] == [
        "**inconclusive at this budget**",
        NOT_RUN,
        "EBCLR - SimCLR, linear top-1: +1 points",
        "—",
        "—",
    ]
    assert knn[1:] == ["**inconclusive at this budget**", NOT_RUN, "EBCLR - SimCLR, kNN top-1: -4 points", "—", "—"]
    doc = Document("t")
    budget_table(doc, [partial, missing])
    header = doc.to_markdown(Path(".")).splitlines()[2]
    assert "verdict at short (2 of 6 cells)" in header and "verdict at long (not run yet: 0 of 24 cells)" in header


def test_a_claim_a_budget_does_not_plan_or_has_no_data_for_yet():
    result = budget("short", SHORT).judged()["ebclr-linear"]
    simclr_only = budget("long", {**LONG, "cells": [c for c in LONG["cells"] if c["group"] == "simclr"]})
    assert shown_verdict(simclr_only, simclr_only.judged()["ebclr-linear"]) == NO_DATA  # planned, not trained yet
    assert shown_verdict(budget("long", LONG, groups=frozenset({"simclr"})), result) == NOT_PLANNED
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
    assert knn[1:3] == ["**contradicted**", "**inconclusive at this budget**"]
    assert linear[-1] == knn[-1] == "not yet: one seed at long"


def test_the_verdict_vs_budget_figure_and_section(tmp_path):
    budgets = [budget("short", SHORT), budget("long", LONG), budget("longer", None)]
    assert budget_figure([budget("long", None)], tmp_path / "none.png") is None  # nothing to draw yet
    doc = Document("t")
    budgets_section(doc, budgets, tmp_path / "plots")
    md = doc.to_markdown(tmp_path)
    assert (tmp_path / "plots" / "verdict-vs-budget.png").stat().st_size > 10_000
    assert "![Verdict vs budget" in md and "longer: docs/results/longer (not run yet: 0 of 6 cells)" in md
