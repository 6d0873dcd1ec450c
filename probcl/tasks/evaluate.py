"""`probcl evaluate`: run evaluation suites on a run and merge their results into eval.json."""
from __future__ import annotations

import inspect
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Optional

from probcl.eval import SUITES, EvalContext
from probcl.core.io import atomic_write_json, read_json
from probcl.core.runs import RunLock, RunPaths, find_checkpoint
from probcl.errors import ConfigError


def evaluate_run(run_dir: str | Path, suites: list[str], device: str = "auto", batch_size: int = 512,
                 feature_layer: str = "backbone", max_train: Optional[int] = None, data_root: Optional[str] = None,
                              options: Optional[dict[str, dict[str, Any]]] = None) -> dict:
    """Run ``suites`` (names, or ``all``) and merge the results into the run's eval.json.

    Results are keyed ``suite`` for backbone features and ``suite@layer`` for other layers.
    """
    find_checkpoint(run_dir)  # clear error before any work
    names = SUITES.names() if suites == ["all"] else suites
    options = options or {}
    check_suite_options(names, options)
    with RunLock(run_dir, "evaluate") if Path(run_dir).is_dir() else nullcontext():
        return _evaluate(Path(run_dir), names, options, EvalContext(Path(run_dir), device, batch_size, feature_layer,
                                                                    max_train, data_root))


def check_suite_options(names: list[str], options: dict[str, dict[str, Any]]) -> None:
    """Raise ConfigError for an unknown suite, an option of a suite not being run, or an unknown option."""
    for name in names:
        SUITES.get(name)
    for suite, given in options.items():
        if suite not in names:
            raise ConfigError(f"--option {suite}.* is for suite {suite!r}, which is not being run "
                              f"(running: {', '.join(names)}); add it to --suite or drop the option")
        accepted = [p for p in inspect.signature(SUITES.get(suite)).parameters if p != "ctx"]
        unknown = sorted(set(given) - set(accepted))
        if unknown:
            raise ConfigError(f"unknown option(s) {', '.join(f'{suite}.{k}' for k in unknown)}; valid options of "
                              f"{suite}: {', '.join(accepted) or 'none'}")


def _evaluate(run_dir: Path, names: list[str], options: dict[str, dict[str, Any]], ctx: EvalContext) -> dict:
    paths = RunPaths(run_dir)
    results = read_json(paths.eval, {})
    for name in names:
        start = time.perf_counter()
        result = SUITES.get(name)(ctx, **options.get(name, {}))
        result.setdefault("protocol", {})["seconds"] = round(time.perf_counter() - start, 2)
        result["protocol"]["checkpoint"] = ctx.model.checkpoint_meta
        key = name if ctx.feature_layer == "backbone" else f"{name}@{ctx.feature_layer}"
        results[key] = result
        atomic_write_json(paths.eval, results)
    return {k: results[k] for k in results if k.split("@")[0] in names}


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
