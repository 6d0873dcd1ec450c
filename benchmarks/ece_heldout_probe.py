"""The VEM calibration claim judged again with an SGD probe that is not mis-scheduled (issue 46, item 4).

The study's cells ran the paper's SGD probe (lr 5 on raw features, 200 epochs): it leaves every probe
overconfident here (SimCLR's test NLL ~1.7 against the L-BFGS probe's ~0.35), so its ECE ranks the probe's schedule
as much as the features. This script evaluates the ``sgd-heldout`` probe (the paper's regime on standardised
features, its lr chosen on held-out training images) on the claim's cells, from their checkpoints, and judges the
claim's comparisons with the study's own rules (``probcl/report/claim_stats.py``: paired and Welch intervals, the
test images' bootstrap spread added, Holm over the claim's comparisons):

    python benchmarks/ece_heldout_probe.py --cells ../wt-v3/runs/study-fmnist-v3/cells --seeds 0 1 3 4 5 \\
        --out docs/results/study-fmnist-v3/ece-sgd-heldout.json

Each cell's ``config.yaml`` and last checkpoint are copied under ``--work`` and evaluated there by the CLI
(``probcl evaluate CELL --suite calibration --option calibration.probes=lbfgs,sgd-heldout``), so the study's cells
are not touched; a cell evaluated before is reused (resumable). Writes the JSON and a Markdown table next to it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `common`, whether run as a script or imported
from common import write_outputs  # noqa: E402

from probcl.core.io import read_json  # noqa: E402
from probcl.report.claims import evaluate_claims  # noqa: E402
from probcl.tasks.evaluate import scalar_metrics  # noqa: E402

CLAIM = "vem-calibration"
PROBE = "sgd-heldout"
METHODS = ["simclr", "vem-langevin", "vem-svgd"]


def evaluated(cell: Path, work: Path) -> dict:
    """The calibration suite of ``cell`` with the held-out-lr SGD probe (evaluated once, under ``work``)."""
    copy = work / cell.name
    result = read_json(copy / "eval.json", {}).get("calibration", {})
    if PROBE in result:
        return result
    (copy / "checkpoints").mkdir(parents=True, exist_ok=True)
    shutil.copy2(cell / "config.yaml", copy / "config.yaml")
    shutil.copy2(cell / "checkpoints" / "last.ckpt", copy / "checkpoints" / "last.ckpt")
    command = [sys.executable, "-m", "probcl.cli", "evaluate", str(copy), "--suite", "calibration"]
    command += ["--option", f"calibration.probes=lbfgs,{PROBE}"]
    subprocess.run(command, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return read_json(copy / "eval.json")["calibration"]


def heldout_claim(study_results: dict) -> dict:
    """The study's VEM calibration claim with its SGD probe's metrics replaced by the held-out-lr probe's."""
    claim = json.loads(
        json.dumps(study_results["config"]["claims"][CLAIM]).replace("calibration/sgd.", f"calibration/{PROBE}.")
    )
    claim["comparisons"] = [c for c in claim["comparisons"] if PROBE in json.dumps(c["value"])]
    for c in claim["comparisons"]:
        c["label"] = c["label"].replace("(SGD probe)", "(SGD probe, lr chosen on held-out images)")
    return claim


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", required=True, help="the study's cell folders (with checkpoints)")
    parser.add_argument("--seeds", nargs="+", type=int, required=True)
    parser.add_argument("--results", default="docs/results/study-fmnist-v3/results.json", help="the study's results")
    parser.add_argument("--work", default="runs/ece-heldout")
    parser.add_argument("--out", default="docs/results/study-fmnist-v3/ece-sgd-heldout.json")
    args = parser.parse_args()
    study = read_json(Path(args.results))
    cells, rows = [], []
    for seed in args.seeds:
        for method in METHODS:
            calibration = evaluated(Path(args.cells) / f"{method}-s{seed}", Path(args.work))
            metrics = {f"calibration/{k}": v for k, v in scalar_metrics(calibration).items()}
            cells.append(
                {"name": f"{method}-s{seed}", "group": method, "seed": seed, "error": None, "metrics": metrics}
            )
            probe, lbfgs = calibration[PROBE], calibration
            rows.append([f"{method}-s{seed}", probe["ece"], probe["nll"], lbfgs["ece"], lbfgs["nll"], probe["top1"]])
    result = evaluate_claims({"config": {"claims": {CLAIM: heldout_claim(study)}}, "cells": cells})[0]
    comparisons = [c.as_data() for c in result.comparisons]
    lines = [
        f"# {CLAIM} with the `{PROBE}` probe",
        "",
        "`python benchmarks/ece_heldout_probe.py` (its docstring says how). Per cell: the held-out-lr SGD probe's ECE",
        "and test NLL beside the L-BFGS probe's (both fitted by this code on the cell's checkpoint).",
        "",
        "| cell | ECE (sgd-heldout) | NLL (sgd-heldout) | ECE (L-BFGS) | NLL (L-BFGS) | top-1 % (sgd-heldout) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        *(f"| {r[0]} | {r[1]:.4f} | {r[2]:.3f} | {r[3]:.4f} | {r[4]:.3f} | {r[5]:.2f} |" for r in rows),
        "",
        f"Verdict with this probe: **{result.verdict}**.",
        "",
        "| comparison | seeds | mean | paired | Welch | verdict |",
        "| --- | ---: | ---: | --- | --- | --- |",
        *(
            f"| {c.label} | {len(c.seeds)} | {c.mean:+.4f} | {_span(c.interval)} | {_span(c.welch)} | {c.verdict} |"
            for c in result.comparisons
            if c.mean is not None
        ),
    ]
    data = {"claim": CLAIM, "probe": PROBE, "verdict": result.verdict, "cells": rows, "comparisons": comparisons}
    write_outputs(Path(args.out), data, "\n".join(lines) + "\n")


def _span(interval: tuple[float, float] | None) -> str:
    return "—" if interval is None else f"[{interval[0]:+.4f}, {interval[1]:+.4f}]"


if __name__ == "__main__":
    main()
