"""Two methods' near-OOD AUROC compared score by score, on a study's published cells (exploratory, after the fact).

Issue 45's own method was chosen on a development split with one OOD score (the kNN distance, k 10, on L2-normalised
features) and is judged on the study's data with another (``probcl score``'s default, which issue 42's rule changed
meanwhile). This script asks, on the confirmation cells, how the difference between two methods depends on the
score: for each score it judges "A - B, AUROC on SET" with the study's code (``probcl/report/claim_stats.py``:
paired and Welch intervals, the same verdict words), one comparison per score and no Holm correction across them
(it is a description of published numbers, not a claim; nothing is chosen from it):

    python benchmarks/paired_by_score.py --results docs/results/study-fmnist-v3/results.json \\
        --a simclr-pred --b simclr --set fashion-mnist:classes=8-9 \\
        --out docs/results/study-fmnist-v3/simclr-pred-vs-simclr-by-score.json

Prints a Markdown table (also written next to ``--out``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `common`, whether run as a script or imported
from common import write_outputs  # noqa: E402

from probcl.core.io import read_json  # noqa: E402
from probcl.report.claim_stats import span  # noqa: E402
from probcl.report.claims import evaluate_claims  # noqa: E402

SCORES = ["default", "knn10", "knn1_raw", "mahalanobis", "feature_norm", "input_stats"]


def by_score_claims(a: str, b: str, ood_set: str, scores: list[str]) -> dict:
    """One single-comparison claim per score: ``a - b``, the AUROC of ``ood_set`` with that score."""
    claims = {}
    for score in scores:
        key = f"ood/sets.{ood_set}.{score}.auroc"
        claims[score] = {
            "paper": "probcl",
            "statement": f"{a} - {b}, AUROC {ood_set}, score {score}",
            "paper_numbers": "none (exploratory)",
            "comparisons": [
                {"label": f"{a} - {b}, {score}", "value": {"minus": [{"metric": [a, key]}, {"metric": [b, key]}]}}
            ],
        }
    return claims


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", required=True, help="a study's published results.json")
    parser.add_argument("--a", required=True, help="the first method's group")
    parser.add_argument("--b", required=True, help="the second method's group")
    parser.add_argument("--set", required=True, dest="ood_set", help="the OOD set, as in the metrics' keys")
    parser.add_argument("--scores", nargs="+", default=SCORES)
    parser.add_argument("--out", required=True, help="JSON to write (a .md table beside it)")
    args = parser.parse_args()
    results = read_json(Path(args.results))
    claims = by_score_claims(args.a, args.b, args.ood_set, args.scores)
    judged = evaluate_claims({**results, "config": {**results["config"], "claims": claims}})
    rows: list[dict[str, Any]] = []
    for result in judged:
        (c,) = result.comparisons
        rows.append({"score": result.name, **c.as_data()})
    lines = [
        f"# {args.a} - {args.b}, near-OOD AUROC on {args.ood_set}, score by score",
        "",
        f"`python benchmarks/paired_by_score.py --results {args.results} --a {args.a} --b {args.b} --set "
        f"{args.ood_set}` (its docstring says why): 95 % paired and Welch intervals, one comparison per score, "
        "uncorrected; exploratory, not a claim.",
        "",
        "| score | seeds | mean difference | paired | Welch | the study's verdict words |",
        "| --- | ---: | ---: | --- | --- | --- |",
        *(
            f"| {r['score']} | {len(r['seeds'])} | "
            + ("—" if r["mean"] is None else f"{r['mean']:+.4f}")
            + f" | {span(r['paired'])} | {span(r['welch'])} | {r['verdict']} |"
            for r in rows
        ),
    ]
    data = {"results": args.results, "a": args.a, "b": args.b, "set": args.ood_set, "comparisons": rows}
    write_outputs(Path(args.out), data, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
