"""Which claims' verdicts moved between two versions of a study, and whether the added seeds alone explain it.

Each verdict that moved from one study to the next (v2 -> v3, at one budget) is to be explained in one sentence
by its cause: the tuning, the seeds, the second split or the analysis. This script gives the evidence for the
seeds: every claim the two results share is judged by today's code (``probcl/report/claim_stats.py``: paired and
Welch intervals, Holm over each claim's comparisons) on

- the earlier study's cells (*before*), with its deciding comparison's paired-only verdict (the earlier studies
  were published on the paired interval alone);
- the later study's cells (*after*);
- the later study's cells of the earlier study's seeds only (*after, before's seeds*): when this verdict is the
  earlier one and *after* differs, the added seeds moved it; when it already differs, the later study's settings
  (its tuning) or cells did.

    python benchmarks/claims_across_studies.py --before docs/results/study-fmnist-v2/results.json \\
        --after docs/results/study-fmnist-v3/results.json --out docs/results/study-fmnist-v3/claims-from-v2.json

Prints a Markdown table (also written next to ``--out``), one row per shared claim, moved ones marked.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `common`, whether run as a script or imported
from claims_without_seeds import summary, without_seeds  # noqa: E402
from common import write_outputs  # noqa: E402

from probcl.core.io import read_json  # noqa: E402
from probcl.report.claim_stats import ClaimResult  # noqa: E402
from probcl.report.claims import evaluate_claims  # noqa: E402


def only_seeds(results: dict, seeds: set[int]) -> dict:
    """``results`` with only the cells of ``seeds`` (every group): the other seeds dropped."""
    return without_seeds(results, {c["seed"] for c in results["cells"]} - seeds)


def seeds_of(results: dict) -> set[int]:
    """The seeds of the cells that trained without error."""
    return {c["seed"] for c in results["cells"] if not c.get("error")}


def shared_claims(before: dict, after: dict) -> list[str]:
    """The claims both results carry, in the later study's order."""
    earlier = before["config"].get("claims") or {}
    return [name for name in after["config"].get("claims") or {} if name in earlier]


def compare(before: dict, after: dict) -> list[dict[str, Any]]:
    """Per shared claim: its verdict and deciding comparison before, after, and after on before's seeds."""
    names = shared_claims(before, after)
    judged = [evaluate_claims(results, names) for results in (before, after, only_seeds(after, seeds_of(before)))]
    rows = []
    for earlier, later, same_seeds in zip(*judged):
        rows.append(
            {
                "claim": earlier.name,
                "before": {**summary(earlier), "paired_only": paired_only(earlier)},
                "after": summary(later),
                "after_before_seeds": summary(same_seeds),
                "moved": earlier.verdict != later.verdict,
                "moved_by_the_seeds": earlier.verdict == same_seeds.verdict != later.verdict,
            }
        )
    return rows


def paired_only(result: ClaimResult) -> str:
    """The deciding comparison's verdict on its paired interval alone (how the earlier studies judged it)."""
    c = result.deciding
    return "missing" if c is None else c.paired_verdict or c.verdict


def table(rows: list[dict[str, Any]], before: str, after: str) -> list[str]:
    """The Markdown lines of the comparison."""
    lines = [
        f"# Claims from `{before}` to `{after}`",
        "",
        "`python benchmarks/claims_across_studies.py` (its docstring says what each column is): every claim judged "
        "by today's code on each study's cells, and on the later study's cells of the earlier study's seeds.",
        "",
        "| claim | before (paired only) | after | after, before's seeds | moved | by the seeds alone |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        decided = {key: row[key]["deciding"] for key in ("before", "after", "after_before_seeds")}
        shown = {
            key: f"**{row[key]['verdict']}**"
            + ("" if decided[key] is None else f": {decided[key]['label']}, {decided[key]['numbers']}")
            + ("" if decided[key] is None else f" ({len(decided[key]['seeds'])} seeds)")
            for key in decided
        }
        shown["before"] += f" ({row['before']['paired_only']})"
        lines.append(
            f"| {row['claim']} | {shown['before']} | {shown['after']} | {shown['after_before_seeds']} | "
            f"{'yes' if row['moved'] else 'no'} | {'yes' if row['moved_by_the_seeds'] else 'no'} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", help="the earlier study's published results.json")
    parser.add_argument("--after", help="the later study's published results.json")
    parser.add_argument("--out", help="JSON to write (a .md table beside it)")
    parser.add_argument(
        "--again", metavar="JSON", help="recompute a JSON this script wrote, from the two results.json it names"
    )
    args = parser.parse_args()
    if args.again:
        recorded = read_json(Path(args.again))
        if recorded is None:
            parser.error(f"no file at {args.again} to recompute")
        args.before, args.after, args.out = recorded["before"], recorded["after"], args.again
    elif not (args.before and args.after and args.out):
        parser.error("give --before, --after and --out, or --again with a JSON this script wrote")
    before, after = read_json(Path(args.before)), read_json(Path(args.after))
    if before is None or after is None:
        parser.error(f"no results.json at {args.before if before is None else args.after}")
    rows = compare(before, after)
    data = {"before": args.before, "after": args.after, "claims": rows}
    write_outputs(Path(args.out), data, "\n".join(table(rows, args.before, args.after)) + "\n")


if __name__ == "__main__":
    main()
