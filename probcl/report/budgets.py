"""A study's claims at several budgets side by side (a benchmark config's ``budgets:``, e.g. the study at 936 and at
4,680 optimiser steps): per claim, the verdict at each budget, then one comparison read at every budget (the one that
decides the claim at the last budget with a verdict, so that the budgets are compared on the same comparison) with
its paired and Welch intervals, and whether its verdict moved with budget; and the "verdict vs budget" figure of
those intervals.

A :class:`Budget` is one benchmark config's results (its published ``results.json``; ``None`` before its first cell)
and its plan (the cells and groups of its grid), so that a budget that has not run, or has run in part, shows as
such. Each budget's verdicts are :mod:`probcl.report.claim_stats`'s on its own results, exactly as its own report
gives them; nothing here judges a claim.
"""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from probcl.report import plots
from probcl.report.claim_stats import PAPER, VERDICT_ORDER, Claim, ClaimResult, ComparisonResult, judge_claims
from probcl.report.claims import parse_claims
from probcl.report.document import Document

NOT_RUN, NO_DATA, NOT_PLANNED = "not run yet", "no data yet", "not in this budget"  # a budget without a verdict
FIGURE = "verdict-vs-budget.png"


@dataclass(frozen=True, eq=False)
class Budget:
    """One budget of a study: its label, its results.json content (None before any cell), and its plan."""

    label: str  # e.g. "936 steps"
    results: dict | None
    planned: int  # cells its config plans
    claims: dict = field(default_factory=dict)  # its config's claims, as data (judged when results lack them)
    source: str = ""  # where its results are published
    seeds: Mapping[str, int] = field(default_factory=dict)  # seeds its config plans per group; empty: unknown

    @property
    def groups(self) -> frozenset[str]:
        """The groups (methods) its config plans; empty: unknown."""
        return frozenset(self.seeds)

    @property
    def done(self) -> int:
        """Cells that trained without error."""
        return sum(not c["error"] for c in (self.results or {}).get("cells", []))

    @property
    def status(self) -> str:
        """``not run yet: 0 of 36 cells`` or ``2 of 59 cells``."""
        return f"{NOT_RUN}: 0 of {self.planned} cells" if not self.done else f"{self.done} of {self.planned} cells"

    def judged(self) -> dict[str, ClaimResult]:
        """Each claim's result at this budget (its results' claims, else its config's; missing ones included)."""
        claims = (self.results or {}).get("config", {}).get("claims") or self.claims
        return {r.name: r for r in judge_claims(self.results or {"cells": []}, parse_claims(claims))}

    def plans(self, claim: Claim) -> bool:
        """Whether this budget plans every group of at least one of the claim's paper-kind comparisons."""
        needs = [{group for group, _ in c.shown} for c in claim.comparisons if c.evidence == PAPER]
        return not self.groups or any(groups <= self.groups for groups in needs)


def provisional(budget: Budget, result: ClaimResult | None) -> str:
    """Why the claim's verdict at ``budget`` may still change with cells its config plans (empty: it will not):
    a paper-kind comparison with data rests on fewer seeds than planned for its arms; or one of its seeds lacks an
    arm that is still to run (a "best of" comparator takes the best of the arms a seed has, so a seed without one
    of them is compared with a weaker comparator than it will be); or one whose arms are all planned has no data yet
    (the claim's verdict is the weakest of those with data, so a missing one can lower it). A budget cut short (its
    extra seeds not run) keeps these marks: that is what makes them provisional."""
    if result is None or not budget.seeds or result.verdict == "missing" or not budget.plans(result.claim):
        return ""
    done = {(cell["group"], cell["seed"]) for cell in (budget.results or {}).get("cells", []) if not cell["error"]}
    done_seeds = Counter(group for group, _ in done)
    short: list[tuple[bool, int, int]] = []  # (not the deciding one, seeds, planned) of comparisons short of seeds
    without_an_arm: set[int] = set()  # seeds compared while one of their arms is still to run
    lacking = planned_comparisons = 0
    for c in result.comparisons:
        groups = {group for group, _ in c.shown}
        if c.evidence != PAPER or not groups <= set(budget.seeds):
            continue
        planned_comparisons += 1
        if c.verdict == "missing":
            lacking += 1
            continue
        planned = min(budget.seeds[g] for g in groups)
        if len(c.seeds) < planned:
            short.append((c is not result.deciding, len(c.seeds), planned))
        to_run = [g for g in groups if done_seeds[g] < budget.seeds[g]]  # arms with planned seeds still to run
        without_an_arm |= {s for s in c.seeds if any((g, s) not in done for g in to_run)}
    reasons = []
    if short:
        _, seeds, planned = min(short)  # the deciding comparison's, else the one with the fewest seeds
        reasons.append(f"{seeds} of {planned} planned seeds")
    if without_an_arm:
        listed = ", ".join(map(str, sorted(without_an_arm)))
        reasons.append(f"seed{'s' if len(without_an_arm) > 1 else ''} {listed} without every arm yet")
    if lacking:
        reasons.append(f"{lacking} of {planned_comparisons} comparisons without data yet")
    return "provisional: " + ", ".join(reasons) if reasons else ""


def claims_by_budget(budgets: list[Budget]) -> list[tuple[Claim, list[ClaimResult | None]]]:
    """Every claim of any budget, in order, with its result at each budget (None where a budget lacks it)."""
    judged = [b.judged() for b in budgets]
    names = list(dict.fromkeys(name for results in judged for name in results))
    return [
        (next(r[name].claim for r in judged if name in r), [results.get(name) for results in judged]) for name in names
    ]


def shown_verdict(budget: Budget, result: ClaimResult | None) -> str:
    """The claim's verdict at ``budget``, or why there is none: not in this budget, not run yet, no data yet."""
    if result is None or not budget.plans(result.claim):
        return NOT_PLANNED
    if result.verdict != "missing":
        return result.verdict
    return NOT_RUN if not budget.done else NO_DATA


def moved(verdicts: list[str], one_seed: Sequence[str] = ()) -> str:
    """``no``, ``yes: A → B``, ``—`` while fewer than two budgets have a verdict, or ``not yet: one seed at B``
    while a budget's verdict rests on one seed (``one_seed``: those budgets' labels), which has no interval and so
    says nothing about movement yet."""
    judged = [v for v in verdicts if v in VERDICT_ORDER]
    if len(judged) < 2:
        return "—"
    if one_seed:
        return "not yet: one seed at " + ", ".join(one_seed)
    return "no" if len(set(judged)) == 1 else "yes: " + " → ".join(judged)


def _weakest(budget: Budget, result: ClaimResult | None) -> list[str]:
    """The paper-kind comparisons that share the claim's verdict at ``budget`` (the deciding one and its equals)."""
    if result is None or result.deciding is None or not budget.plans(result.claim):
        return []
    return [c.label for c in result.comparisons if c.evidence == PAPER and c.verdict == result.deciding.verdict]


def anchor(budgets: list[Budget], results: list[ClaimResult | None]) -> str | None:
    """The label of the comparison a claim's budgets are compared on: one that decides it at the last budget that
    plans it and has a verdict (of several equally weak ones there, the one equally weak at most budgets); the same
    comparison is then read at every budget (None: no budget has data)."""
    weakest = [_weakest(b, r) for b, r in zip(budgets, results)]
    last = next((labels for labels in reversed(weakest) if labels), [])
    return max(last, key=lambda label: sum(label in labels for labels in weakest), default=None)


def same_comparison(result: ClaimResult | None, label: str | None) -> ComparisonResult | None:
    """The comparison called ``label`` in ``result`` (None when either is missing)."""
    if result is None or label is None:
        return None
    return next((c for c in result.comparisons if c.label == label), None)


def _comparison_verdict(budget: Budget, result: ClaimResult | None, comparison: ComparisonResult | None) -> str:
    """The verdict of the compared comparison at ``budget``, or why there is none."""
    if result is None or not budget.plans(result.claim):
        return NOT_PLANNED
    if comparison is not None and comparison.verdict != "missing":
        return comparison.verdict
    return NOT_RUN if not budget.done else NO_DATA


def _cell(result: ClaimResult | None, comparison: ComparisonResult | None) -> str:
    """The compared comparison at one budget: its numbers and verdict, and the comparison that decides the claim
    there when that is another one."""
    if comparison is None or comparison.mean is None:
        return "—"
    text = f"{comparison.numbers()}: {comparison.verdict}"
    deciding = result.deciding if result is not None else None
    if deciding is not None and deciding.label != comparison.label:
        text += f" (the claim is decided here by {deciding.label}: {deciding.numbers()}: {deciding.verdict})"
    return text


def _marked(verdict: str, mark: str) -> str:
    """A verdict in bold (when it is one), with why it is provisional in brackets."""
    shown = f"**{verdict}**" if verdict in VERDICT_ORDER else verdict
    return f"{shown} ({mark})" if mark else shown


def budget_table(doc: Document, budgets: list[Budget]) -> None:
    """One row per claim: its verdict at each budget, then ONE comparison (the one deciding it at the last budget
    with a verdict) at every budget, and whether that comparison's verdict moved with budget."""
    rows = []
    for claim, results in claims_by_budget(budgets):
        verdicts = [shown_verdict(b, r) for b, r in zip(budgets, results)]
        label = anchor(budgets, results)
        compared = [same_comparison(r, label) for r in results]
        moves = [_comparison_verdict(b, r, c) for b, r, c in zip(budgets, results, compared)]
        one_seed = [
            b.label for b, c in zip(budgets, compared) if c is not None and c.mean is not None and not c.seeds[1:]
        ]
        marks = [provisional(b, r) for b, r in zip(budgets, results)]
        rows.append(
            [
                f"{claim.paper}: {claim.statement}",
                *(_marked(v, mark) for v, mark in zip(verdicts, marks)),
                label or "—",
                *(_cell(r, c) for r, c in zip(results, compared)),
                moved(moves, one_seed),
            ]
        )
    doc.table(
        [
            "claim",
            *(f"verdict at {b.label} ({b.status})" for b in budgets),
            "compared at every budget: the comparison deciding the claim at the last budget with a verdict",
            *(f"at {b.label}: mean difference, paired and Welch intervals: its verdict" for b in budgets),
            "this comparison moved with budget",
        ],
        rows,
    )


def budgets_paragraph(budgets: list[Budget]) -> str:
    """What the budget table shows and where each budget's results come from."""
    sources = "; ".join(f"{b.label}: {b.source or 'results'} ({b.status})" for b in budgets)
    return (
        f"The same claims at each budget ({sources}), each judged on that budget's own cells. Each comparison "
        "shows its paired and its Welch (unpaired) interval; it is reproduced or contradicted only when both "
        "agree, and the intervals of the comparisons that decide a claim are Holm-corrected for their number "
        "(the level and the number are shown when above one). The claim is then compared across budgets on one "
        "comparison, the one deciding it at the last budget with a verdict: *moved with budget* compares that "
        "comparison's verdicts, once each rests on two or more seeds; a budget still running gives a verdict from "
        "the seeds it has, marked *provisional* while one of the claim's comparisons rests on fewer seeds than "
        "the config plans, compares a seed whose arms have not all run, or has no data yet."
    )


def budgets_markdown(doc: Document, budgets: list[Budget]) -> None:
    """The paragraph and the table (the README's and the docs' view)."""
    doc.paragraph(budgets_paragraph(budgets))
    budget_table(doc, budgets)


def _panel(claim: Claim, budgets: list[Budget], results: list[ClaimResult | None]) -> tuple | None:
    """One claim's panel of :func:`probcl.report.plots.interval_panels` (the compared comparison's paired and Welch
    intervals at each budget), None when no budget has a mean."""
    label = anchor(budgets, results)
    rows, guides, unit = [], {0.0}, ""
    for budget, result in zip(budgets, results):
        c = same_comparison(result, label)
        mean = c.mean if c is not None else None
        name = f"{budget.label}: {c.verdict if c is not None and mean is not None else shown_verdict(budget, result)}"
        rows.append((f"{name}\npaired", mean, c.interval if c else None))
        rows.append(("Welch", mean, c.welch if c else None))
        if c is not None and mean is not None:
            guides.add(-c.margin)
            unit = c.unit
    if not unit or label is None:
        return None
    xlabel = "\n".join(textwrap.wrap(f"{label} ({unit})", 70))
    return f"{claim.paper}: {claim.statement}", xlabel, rows, sorted(guides)


def budget_figure(budgets: list[Budget], path: Path) -> Path | None:
    """The "verdict vs budget" figure: per claim, one comparison (the one deciding it at the last budget with a
    verdict), its mean difference and its paired and Welch intervals at each budget (dashed: 0 and the "no worse than"
    margin); None when no budget has a verdict yet."""
    panels = [p for claim, results in claims_by_budget(budgets) if (p := _panel(claim, budgets, results))]
    if not panels:
        return None
    title = "verdict vs budget: one comparison per claim, paired and Welch intervals"
    return plots.interval_panels(panels, path, title)


def budgets_section(doc: Document, budgets: list[Budget], plot_dir: Path) -> None:
    """The report's section: paragraph, table and figure."""
    budgets_markdown(doc, budgets)
    path = budget_figure(budgets, plot_dir / FIGURE)
    if path is not None:
        doc.figure(
            path,
            "Verdict vs budget: per claim, the comparison deciding it at the last budget, its mean difference "
            "(positive supports the claim) with its paired and Welch intervals at each budget (a dot alone: one seed "
            "or a coded value)",
        )
