"""`probcl evaluate`: run evaluation suites on a run and merge their results into eval.json."""
from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from probcl.core.io import atomic_write_json, read_json
from probcl.core.runs import RunLock, RunPaths, find_checkpoint
from probcl.eval import SUITES, ModelOnData


def evaluate_run(run_dir: str | Path, suites: list[str], device: str = "auto", batch_size: int = 512,
                 feature_layer: str = "backbone", max_train: int | None = None, data_root: str | None = None,
                 options: dict[str, dict[str, Any]] | None = None, seed: int = 0, num_workers: int = 0,
                 figures: bool = True) -> dict:
    """Run ``suites`` (names, or ``all``) and merge the results into the run's eval.json.

    Results are keyed ``suite`` for backbone features and ``suite@layer`` for other layers.
    Suite names and ``options`` are validated before any work. With ``figures``, the figures of the
    suites run are drawn into RUN/plots (see :mod:`probcl.report.figures`).
    """
    names = SUITES.names() if suites == ["all"] else suites
    parsed = SUITES.parse_all(names, options)
    find_checkpoint(run_dir)  # clear error before any work
    with RunLock(run_dir, "evaluate") if Path(run_dir).is_dir() else nullcontext():
        ctx = ModelOnData(Path(run_dir), device, batch_size, feature_layer, max_train, data_root, seed, num_workers)
        return _evaluate(Path(run_dir), names, parsed, ctx, feature_layer, figures)


def _evaluate(run_dir: Path, names: list[str], parsed: dict[str, Any], ctx: ModelOnData, feature_layer: str,
              figures: bool) -> dict:
    paths = RunPaths(run_dir)
    results = read_json(paths.eval, {})
    for name in names:
        start = time.perf_counter()
        result = SUITES.get(name).run(ctx, parsed[name])
        result.setdefault("protocol", {})["seconds"] = round(time.perf_counter() - start, 2)
        result["protocol"]["checkpoint"] = ctx.model.checkpoint_meta
        results[result_key(name, feature_layer)] = result
        atomic_write_json(paths.eval, results)
    if figures:
        from probcl.report.figures import render_run_figures

        render_run_figures({name: results[result_key(name, feature_layer)] for name in names},
                           result_key(ctx.method, feature_layer), paths.plots)
    return {k: results[k] for k in results if k.split("@")[0] in names}


def result_key(suite: str, feature_layer: str) -> str:
    """The key of a suite's result in eval.json: ``suite``, or ``suite@layer`` for non-backbone features."""
    return suite if feature_layer == "backbone" else f"{suite}@{feature_layer}"


PLOT_DATA_KEYS = ("protocol", "histograms", "bins", "curves", "plot")  # not metrics: skipped by scalar_metrics


def scalar_metrics(result: dict, prefix: str = "") -> dict[str, float]:
    """The numeric leaves of a (nested) suite result as {"dotted.path": value}; protocol and plot data skipped."""
    out: dict[str, float] = {}
    for key, value in result.items():
        if key in PLOT_DATA_KEYS:
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(scalar_metrics(value, f"{name}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
    return out


def format_table(results: dict) -> list[tuple[str, str, str]]:
    """Rows (suite, metric, value) of the scalar results, for printing."""
    return [(suite, metric, f"{value:.4g}") for suite, result in results.items()
            for metric, value in scalar_metrics(result).items()]
