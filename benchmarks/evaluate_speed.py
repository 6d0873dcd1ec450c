"""What `probcl evaluate --suite linear,knn` costs on a trained run, and how close its linear probe gets to the optimum.

    python benchmarks/evaluate_speed.py runs/simclr-fmnist

Prints and writes (JSON):

- ``probcl evaluate RUN --suite linear,knn`` end to end in a fresh process, without the report (``--no-report``)
  and then with it (the report's t-SNE embedding map is computed once per checkpoint and cached);
- its parts, in process: feature extraction of the train and test splits in the run's training precision, the
  weighted kNN, and the linear probe with each solver: the preconditioned L-BFGS probcl uses (50 iterations per
  grid fit, 200 for the final fit) and the plain L-BFGS it replaced (300 and 300), each with its selected L2,
  test top-1, and the relative gap of its final objective to a tight float64 fit of the same problem
  (preconditioned L-BFGS to ``--reference-iterations``, whose final gradient is reported).

The runs evaluate on their own ``eval.json``: use a copy of a run you do not want re-evaluated.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from probcl.core.io import atomic_write_json
from probcl.eval.knn import topk_accuracy, weighted_knn_scores
from probcl.eval.linear import ProbeProblem, linear_probe
from probcl.tasks.evaluate import EvaluateSettings

ROOT = Path(__file__).resolve().parent.parent


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def cli_seconds(run: Path, *extra: str) -> float:
    """Wall time of `probcl evaluate RUN --suite linear,knn` in a fresh process."""
    env = {**os.environ, "PROBCL_NO_PROGRESS": "1"}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "probcl.cli", "evaluate", str(run), "--suite", "linear,knn", *extra],
        check=True,
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def reference_objective(problem: ProbeProblem, classes: int, l2: float, iterations: int) -> tuple[float, float]:
    """The objective at a tight fit of the float64 ``problem`` (preconditioned L-BFGS) and its largest |gradient|."""
    probe = problem.fit(classes, l2, iterations)
    loss, weight_gradient, bias_gradient = problem.objective_and_gradient(probe.weight, probe.bias, l2)
    return loss.item(), max(weight_gradient.abs().max().item(), bias_gradient.abs().max().item())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a trained run (it is copied; the copy is evaluated)")
    parser.add_argument("--reference-iterations", type=int, default=2000)
    parser.add_argument("--out", default="benchmarks/results/evaluate_speed.json")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / args.run.name
        shutil.copytree(args.run, run, ignore=shutil.ignore_patterns("eval*.json", "plots", "report.*"))
        cli_no_report = cli_seconds(run, "--no-report")
        shutil.rmtree(run)
        shutil.copytree(args.run, run, ignore=shutil.ignore_patterns("eval*.json", "plots", "report.*"))
        cli_with_report = cli_seconds(run)

        ctx = EvaluateSettings().context(run)
        (train, test), features_s = timed(lambda: (ctx.features("train"), ctx.features("test")))
    (train_f, train_y), (test_f, test_y) = train, test
    classes = ctx.num_classes
    knn, knn_s = timed(lambda: topk_accuracy(weighted_knn_scores(train_f, train_y, test_f, classes), test_y))
    solvers = {
        "preconditioned L-BFGS (probcl)": {},
        "plain L-BFGS (before)": {"precondition": False, "grid_iter": 300, "max_iter": 300},
    }
    rows: dict[str, dict] = {}
    references: dict[float, tuple[float, float]] = {}
    exact = ProbeProblem.of(train_f.double(), train_y)  # the problem in float64, once: references and objectives
    for name, kwargs in solvers.items():
        (result, probe), seconds = timed(
            lambda kwargs=kwargs: linear_probe(train_f, train_y, test_f, test_y, classes, **kwargs)
        )
        l2 = result["protocol"]["l2"]
        if l2 not in references:
            references[l2] = reference_objective(exact, classes, l2, args.reference_iterations)
        reference, _ = references[l2]
        objective = exact.objective(probe.weight.double(), probe.bias.double(), l2)
        rows[name] = {
            "seconds": round(seconds, 2),
            "l2": l2,
            "top1": round(result["top1"], 2),
            "objective": objective.item(),
            "relative_gap": (objective.item() - reference) / reference,
        }
    out = {
        "run": str(args.run),
        "date": time.strftime("%Y-%m-%d"),
        "cpu": platform.processor() or platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "train_images": len(train_f),
        "test_images": len(test_f),
        "feature_precision": ctx.precision.precision,
        "cli_evaluate_linear_knn_no_report_seconds": round(cli_no_report, 1),
        "cli_evaluate_linear_knn_with_report_seconds": round(cli_with_report, 1),
        "features_seconds": round(features_s, 2),
        "knn_seconds": round(knn_s, 2),
        "knn_top1": round(knn["top1"], 2),
        "probes": rows,
        "references": {str(l2): {"objective": f, "max_abs_gradient": g} for l2, (f, g) in references.items()},
    }
    print(
        f"{args.run}: {len(train_f)} train / {len(test_f)} test features, {ctx.precision.precision}, "
        f"CPU {out['cpu_capability']}, {out['threads']} threads, load {out['load_average_1min']}"
    )
    print(
        f"probcl evaluate --suite linear,knn --no-report: {cli_no_report:.1f} s; "
        f"with the report: {cli_with_report:.1f} s"
    )
    print(f"features {features_s:.1f} s, kNN {knn_s:.1f} s (top-1 {knn['top1']:.2f} %)")
    for name, row in rows.items():
        print(
            f"{name:<32} {row['seconds']:>6.1f} s  l2 {row['l2']:g}  top-1 {row['top1']:.2f} %  "
            f"gap to the optimum {row['relative_gap']:.1e}"
        )
    atomic_write_json(args.out, out)


if __name__ == "__main__":
    main()
