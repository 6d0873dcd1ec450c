"""A study's claims judged again without some seeds: is a verdict carried by the cells of one seed?

Used where the cells of one seed did not all run on one kind of hardware (study v3: seed 2 ran on a lent H200 except
`simclr-pred-s2`, which ran on the CPU when no device was lent again), so that the paired differences of that seed
mix hardware. The claims are judged by the study's own code (``probcl/report/claim_stats.py``: paired and Welch
intervals, Holm over each claim's comparisons) on the published results, once with every seed and once with
``--drop-seeds`` removed from every arm:

    python benchmarks/claims_without_seeds.py --results docs/results/study-fmnist-v3/results.json \\
        --drop-seeds 2 --claims own-method --out docs/results/study-fmnist-v3/own-method-without-seed-2.json

Prints a Markdown table (also written next to ``--out``): per claim, its verdict and its deciding comparison's mean
and intervals, with all seeds and without the dropped ones.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `common`, whether run as a script or imported
from common import write_outputs  # noqa: E402

from probcl.core.io import read_json  # noqa: E402
from probcl.report.claim_stats import ClaimResult  # noqa: E402
from probcl.report.claims import evaluate_claims  # noqa: E402


def without_seeds(results: dict, seeds: set[int]) -> dict:
    """``results`` with the cells of ``seeds`` removed (every group)."""
    return {**results, "cells": [c for c in results["cells"] if c["seed"] not in seeds]}


def summary(result: ClaimResult) -> dict:
    """A claim's verdict and its deciding comparison, as data."""
    c = result.deciding
    return {"verdict": result.verdict, "deciding": None if c is None else c.as_data()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", required=True, help="a study's published results.json")
    parser.add_argument("--drop-seeds", nargs="+", type=int, required=True, help="seeds to leave out")
    parser.add_argument("--claims", nargs="*", default=None, help="claim names (default: all of the results')")
    parser.add_argument("--out", required=True, help="JSON to write (a .md table beside it)")
    args = parser.parse_args()
    results = read_json(Path(args.results))
    dropped = set(args.drop_seeds)
    every = evaluate_claims(results, args.claims)
    kept = evaluate_claims(without_seeds(results, dropped), args.claims)
    rows: list[dict[str, Any]] = [
        {"claim": a.name, "all seeds": summary(a), "without": summary(b)} for a, b in zip(every, kept)
    ]
    seeds = ", ".join(map(str, sorted(dropped)))
    lines = [
        f"# Claims without seed {seeds}",
        "",
        f"`python benchmarks/claims_without_seeds.py --results {args.results} --drop-seeds {seeds}` "
        "(its docstring says why): each claim judged by the study's code on every seed, then without these.",
        "",
        f"| claim | verdict, all seeds | deciding comparison, all seeds | verdict without seed {seeds} "
        f"| deciding comparison without seed {seeds} |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        cells = []
        for key in ("all seeds", "without"):
            found = row[key]
            deciding = found["deciding"]
            cells += [f"**{found['verdict']}**", "—" if deciding is None else f"{deciding['label']}: "
                      f"{deciding['numbers']} ({len(deciding['seeds'])} seeds)"]  # fmt: skip
        lines.append(f"| {row['claim']} | " + " | ".join(cells) + " |")
    data = {"results": args.results, "dropped_seeds": sorted(dropped), "claims": rows}
    write_outputs(Path(args.out), data, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
