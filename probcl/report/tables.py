"""Suite results as report tables, shared by the benchmark report and the run report.

Metrics are keyed ``"<result key>/<dotted metric>"`` (result key: ``suite`` or ``suite@layer``) and
grouped by label (a benchmark's method, or one run) as ``{"mean", "std", "n"}`` statistics: the
``groups`` of a benchmark's ``results.json``; :func:`run_groups` builds them from one run's eval.json.
"""

from __future__ import annotations

from collections.abc import Callable

from probcl.core.catalog import suite_titles
from probcl.core.registry import Registry
from probcl.report.document import Document

TableHook = Callable[[Document, dict, str], None]
TABLES: Registry[TableHook] = Registry("suite tables")  # suites whose metrics need their own table layout
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


def run_groups(label: str, evaluations: dict[str, dict]) -> dict[str, dict]:
    """One run's eval.json ``{result key: result}`` as report groups: ``{label: {"metrics": {key: stat}}}``."""
    metrics = {
        f"{key}/{name}": {"mean": value, "std": None, "n": 1}
        for key, result in evaluations.items()
        for name, value in scalar_metrics(result).items()
    }
    return {label: {"metrics": metrics}}


def format_stat(stat: dict | None) -> str:
    """``mean +- std`` (std only over several seeds); 3 decimals for values in [-1, 1], else 2."""
    if not stat:
        return ""
    digits = 3 if abs(stat["mean"]) <= 1 else 2
    text = f"{stat['mean']:.{digits}f}"
    return text + (f" ± {stat['std']:.{digits}f}" if stat.get("std") is not None else "")


def result_keys(results: dict) -> list[str]:
    """The result keys (``suite``, ``suite@layer``) of registered suites present in ``results["groups"]``, in order."""
    keys = dict.fromkeys(k.split("/")[0] for g in results["groups"].values() for k in g["metrics"])
    return [key for key in keys if key.split("@")[0] in suite_titles()]  # e.g. train/seconds_per_epoch is no suite


def suite_tables(doc: Document, results: dict) -> None:
    """One table per suite result key: metrics as rows, methods as columns, unless the suite registers
    its own layout in ``TABLES``."""
    for key in result_keys(results):
        suite_table(doc, results, key)


def suite_title(key: str) -> str:
    """The suite's title, with the feature layer of a ``suite@layer`` key."""
    suite, _, layer = key.partition("@")
    return suite_titles()[suite] + (f" ({layer} features)" if layer else "")


def suite_table(doc: Document, results: dict, key: str) -> None:
    """The heading and table(s) of one result key (``suite`` or ``suite@layer``)."""
    groups = results["groups"]
    suite = key.split("@")[0]
    if suite in TABLES:
        TABLES.get(suite)(doc, results, key)
        return
    metrics = list(dict.fromkeys(k for g in groups.values() for k in g["metrics"] if k.split("/")[0] == key))
    doc.heading(suite_title(key), 3)
    doc.table(
        ["metric", *groups],
        [[k.split("/", 1)[1], *(format_stat(g["metrics"].get(k)) for g in groups.values())] for k in metrics],
    )


@TABLES.register("ood")
def ood_tables(doc: Document, results: dict, suite: str) -> None:
    groups = results["groups"]
    entries: dict[tuple[str, str], dict[str, dict]] = {}  # (set, metric) -> {score: {group: stat}}
    for name, g in groups.items():
        for key, stat in g["metrics"].items():
            head, _, rest = key.partition("/")
            if head != suite or not rest.startswith("sets."):
                continue
            set_and_score, _, metric = rest[len("sets.") :].rpartition(".")
            set_name, _, score = set_and_score.rpartition(".")
            entries.setdefault((set_name, metric), {}).setdefault(score, {})[name] = stat
    doc.heading(suite_title(suite), 3)
    doc.paragraph(
        "Outlier scores (higher = more OOD); AUROC/AUPR-out with OOD positive; FPR95 = share of OOD "
        "accepted when 95% of in-distribution test images are accepted (lower is better)."
    )
    if len(groups) == 1:  # one run: a table per metric, scores as rows and OOD sets as columns
        for metric in ("auroc", "fpr95"):
            sets = [set_name for set_name, m in entries if m == metric]
            scores = list(
                dict.fromkeys(score for (_, m), by_score in entries.items() if m == metric for score in by_score)
            )
            doc.paragraph(f"{metric.upper()} per OOD set:")
            doc.table(
                ["score", *sets],
                [
                    [score, *(format_stat(entries[(s, metric)].get(score, {}).get(name)) for s in sets)]
                    for score in scores
                    for name in groups
                ],
            )
        return
    for (set_name, metric), by_score in entries.items():
        if metric not in ("auroc", "fpr95"):
            continue
        doc.paragraph(f"{metric.upper()} against `{set_name}`:")
        doc.table(
            ["method", *by_score], [[name, *(format_stat(by_score[s].get(name)) for s in by_score)] for name in groups]
        )
