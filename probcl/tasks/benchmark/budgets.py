"""A study's budgets (its config's ``budgets:``) as :class:`~probcl.report.budgets.Budget` s: each named benchmark
config's published results and plan, for the report's and the README's side-by-side verdicts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from probcl.core.io import read_json
from probcl.report.budgets import Budget
from probcl.tasks.benchmark.grid import BenchmarkConfig, grid, load_benchmark


def results_folder(bench: BenchmarkConfig) -> str:
    """Where a benchmark's results.json is kept: its ``publish`` folder, else its ``out``."""
    return bench.publish or bench.out


def load_budgets(bench: BenchmarkConfig, current: dict | None = None, root: Path = Path(".")) -> list[Budget]:
    """Each of ``bench.budgets``: the named config's plan and its results.json under ``root`` (None where it has
    none yet); ``current``, when given, stands for ``bench``'s own results (the ones being reported)."""
    budgets = []
    for label, name in bench.budgets.items():
        other, _ = load_benchmark(name)
        folder = results_folder(other)
        own = current is not None and folder == results_folder(bench)
        results = current if own else read_json(root / folder / "results.json")
        cells = grid(other)
        seeds = Counter(c.group for c in cells)
        budgets.append(Budget(label, results, len(cells), other.claims, folder, seeds))
    return budgets
