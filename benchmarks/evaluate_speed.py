"""What `probcl evaluate --suite linear,knn` costs on a trained run, how close kNN and the linear probe get to their
bounds, and how close the probe gets to the optimum.

    python benchmarks/evaluate_speed.py runs/simclr-fmnist [--baseline /path/to/another/checkout]

Prints and writes (JSON):

- ``probcl evaluate RUN --suite linear,knn --no-report`` end to end in a fresh process, on a copy of the run:
  cold (no cached features) and warm (the features cached in ``RUN/feature-cache/`` by the cold call); with
  ``--baseline``, the same command of another checkout (``python -m probcl.cli`` run there, e.g. main before a
  change), cold, interleaved with this checkout's over ``--repeats`` rounds, so both see the same machine load;
- its parts, in process: feature extraction of the train and test splits in the run's training precision (cold,
  and read back from the cache), the weighted + plain kNN of the knn suite, and the linear probe;
- the bounds, measured in the same process: kNN's Gram matrix products (2 N_test N_train d flops) at the peak of a
  large float32 matrix product; the probe at memory bandwidth: one plain pass (``x.sum()``) over the features of
  each objective + gradient evaluation it made (two passes are what it reads: the logits, then the gradient);
- the probe's selected L2, test top-1, and the relative gap of its final objective to a tight float64 fit of the
  same problem (preconditioned L-BFGS to ``--reference-iterations``, whose largest final |gradient| is reported);
  ``--plain`` adds the plain L-BFGS solver the preconditioned one replaced (300 + 300 iterations).

Evaluations write ``eval.json``: the run is copied, and only the copy is evaluated.
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
from probcl.eval.knn import knn_classify, topk_accuracy
from probcl.eval.linear import ProbeProblem, linear_probe
from probcl.eval.suites import KnnOptions
from probcl.tasks.evaluate import EvaluateSettings

ROOT = Path(__file__).resolve().parent.parent
COPY_IGNORED = shutil.ignore_patterns("eval*.json", "plots", "report.*", "feature-cache", "score-cache")


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def best_of(fn, repeats: int = 5) -> float:
    """The shortest of ``repeats`` timings of ``fn()`` (after one warm-up call)."""
    fn()
    return min(timed(fn)[1] for _ in range(repeats))


def fresh_copy(source: Path, run: Path) -> Path:
    """``run``, a fresh copy of ``source`` without results or caches."""
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(source, run, ignore=COPY_IGNORED)
    return run


def cli_seconds(run: Path, checkout: Path = ROOT) -> float:
    """Wall time of ``probcl evaluate RUN --suite linear,knn --no-report`` of ``checkout`` in a fresh process."""
    env = {**os.environ, "PROBCL_NO_PROGRESS": "1", "PYTHONPATH": str(checkout)}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "probcl.cli", "evaluate", str(run), "--suite", "linear,knn", "--no-report"],
        check=True,
        env=env,
        cwd=checkout,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def reference_objective(problem: ProbeProblem, classes: int, l2: float, iterations: int) -> tuple[float, float]:
    """The objective at a tight fit of the float64 ``problem`` (preconditioned L-BFGS) and its largest |gradient|."""
    probe = problem.fit(classes, l2, iterations)
    loss, weight_gradient, bias_gradient = problem.objective_and_gradient(probe.weight, probe.bias, l2)
    return loss.item(), max(weight_gradient.abs().max().item(), bias_gradient.abs().max().item())


def counted_probe(train_f, train_y, test_f, test_y, classes, **kwargs):
    """:func:`linear_probe`, with the rows its objective + gradient evaluations read (one count per pass)."""
    rows = [0]
    evaluate = ProbeProblem.objective_and_gradient

    def counting(problem, weight, bias, l2):
        rows[0] += len(problem.x)
        return evaluate(problem, weight, bias, l2)

    ProbeProblem.objective_and_gradient = counting
    try:
        (result, probe), seconds = timed(lambda: linear_probe(train_f, train_y, test_f, test_y, classes, **kwargs))
    finally:
        ProbeProblem.objective_and_gradient = evaluate
    return result, probe, seconds, rows[0]


def matmul_peak_flops() -> float:
    """Flops per second of a 4096^3 float32 matrix product (the compute bound of kNN's Gram products)."""
    a, b = torch.randn(4096, 4096), torch.randn(4096, 4096)
    return 2 * 4096**3 / best_of(lambda: a @ b, 3)


def cli_rounds(source: Path, tmp: Path, baseline: Path | None, repeats: int) -> dict[str, list[float]]:
    """End-to-end seconds, interleaved: this checkout cold then warm (the cold call's cache), the baseline cold."""
    out: dict[str, list[float]] = {"cold": [], "warm": [], **({"baseline_cold": []} if baseline else {})}
    for _ in range(repeats):
        run = fresh_copy(source, tmp / "run")
        out["cold"].append(cli_seconds(run))
        (run / "eval.json").unlink()
        out["warm"].append(cli_seconds(run))
        if baseline is not None:
            out["baseline_cold"].append(cli_seconds(fresh_copy(source, tmp / "run"), baseline))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a trained run (it is copied; the copy is evaluated)")
    parser.add_argument("--baseline", type=Path, help="another probcl checkout to time the same command of")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved rounds of the end-to-end timings")
    parser.add_argument("--reference-iterations", type=int, default=1000)
    parser.add_argument("--plain", action="store_true", help="also time the plain L-BFGS solver (300 + 300)")
    parser.add_argument("--out", default="benchmarks/results/evaluate_speed.json")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]

    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        cli = cli_rounds(args.run, tmp, args.baseline, args.repeats)
        run = fresh_copy(args.run, tmp / "run")
        ctx = EvaluateSettings().context(run)
        (train, test), features_s = timed(lambda: (ctx.features("train"), ctx.features("test")))
        cached = EvaluateSettings().context(run)
        _, features_cached_s = timed(lambda: (cached.features("train"), cached.features("test")))
    (train_f, train_y), (test_f, test_y) = train, test
    classes = ctx.num_classes

    knn_options = KnnOptions()
    (scores, _), knn_s = timed(
        lambda: knn_classify(
            train_f, train_y, test_f, classes, knn_options.knn_k, knn_options.temperature, knn_options.plain_k
        )
    )
    knn = topk_accuracy(scores, test_y)
    peak = matmul_peak_flops()
    gram_flops = 2 * len(test_f) * len(train_f) * train_f.shape[1]
    x = ProbeProblem.of(train_f, train_y, precondition=False).x  # standardized float32, as the probe reads it
    pass_s = best_of(lambda: x.sum())
    seconds_per_row = pass_s / len(x)

    solvers: dict[str, dict] = {"preconditioned L-BFGS (probcl)": {}}
    if args.plain:
        solvers["plain L-BFGS (before)"] = {"precondition": False, "grid_iter": 300, "max_iter": 300}
    rows: dict[str, dict] = {}
    references: dict[float, tuple[float, float]] = {}
    exact = ProbeProblem.of(train_f.double(), train_y)  # the problem in float64, once: references and objectives
    for name, kwargs in solvers.items():
        result, probe, seconds, rows_read = counted_probe(train_f, train_y, test_f, test_y, classes, **kwargs)
        l2 = result["protocol"]["l2"]
        if l2 not in references:
            references[l2] = reference_objective(exact, classes, l2, args.reference_iterations)
        reference, _ = references[l2]
        objective = exact.objective(probe.weight.double(), probe.bias.double(), l2).item()
        bound_s = rows_read * seconds_per_row
        rows[name] = {
            "seconds": round(seconds, 2),
            "evaluations_in_passes_over_train": round(rows_read / len(x), 1),
            "bandwidth_bound_seconds": round(bound_s, 2),
            "fraction_of_bound": round(bound_s / seconds, 3),
            "l2": l2,
            "top1": round(result["top1"], 2),
            "objective": objective,
            "relative_gap": (objective - reference) / reference,
        }
    out = {
        "run": str(args.run),
        "date": time.strftime("%Y-%m-%d"),
        "cpu": platform.processor() or platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "load_average_1min": {"start": round(load_before, 2), "end": round(os.getloadavg()[0], 2)},
        "train_images": len(train_f),
        "test_images": len(test_f),
        "feature_dim": train_f.shape[1],
        "feature_precision": ctx.precision.precision,
        "cli_evaluate_linear_knn_no_report_seconds": {k: [round(s, 1) for s in v] for k, v in cli.items()},
        "baseline": str(args.baseline) if args.baseline else None,
        "features_seconds": round(features_s, 2),
        "features_from_cache_seconds": round(features_cached_s, 2),
        "knn_seconds": round(knn_s, 2),
        "knn_gram_compute_bound_seconds": round(gram_flops / peak, 2),
        "knn_fraction_of_bound": round(gram_flops / peak / knn_s, 3),
        "matmul_peak_gflops": round(peak / 1e9, 1),
        "knn_top1": round(knn["top1"], 2),
        "one_pass_over_train_features_ms": round(pass_s * 1e3, 2),
        "probes": rows,
        "references": {str(l2): {"objective": f, "max_abs_gradient": g} for l2, (f, g) in references.items()},
    }
    print(
        f"{args.run}: {len(train_f)} train / {len(test_f)} test features of {train_f.shape[1]} dimensions, "
        f"{ctx.precision.precision}, CPU {out['cpu_capability']}, {out['threads']} threads, "
        f"load {load_before:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    for kind, seconds in cli.items():
        print(f"probcl evaluate --suite linear,knn --no-report, {kind}: {', '.join(f'{s:.1f}' for s in seconds)} s")
    print(f"features {features_s:.1f} s (from the cache {features_cached_s:.1f} s)")
    print(
        f"kNN {knn_s:.1f} s (top-1 {knn['top1']:.2f} %): {out['knn_fraction_of_bound']:.2f} of the Gram products' "
        f"compute bound ({gram_flops / peak:.1f} s at {peak / 1e9:.0f} GFLOP/s)"
    )
    for name, row in rows.items():
        print(
            f"{name:<32} {row['seconds']:>6.1f} s  {row['fraction_of_bound']:.2f} of the bandwidth bound "
            f"({row['evaluations_in_passes_over_train']:g} passes of {pass_s * 1e3:.1f} ms)  l2 {row['l2']:g}  "
            f"top-1 {row['top1']:.2f} %  gap to the optimum {row['relative_gap']:.1e}"
        )
    atomic_write_json(args.out, out)


if __name__ == "__main__":
    main()
