"""The benchmark report: tables (mean +- std over seeds) and figures built from ``results.json``
and the cells' run directories, written as ``report.md`` and a self-contained ``report.html``."""
from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

from probcl.core.io import atomic_write_text, read_json
from probcl.core.registry import Registry
from probcl.core.runs import RunPaths, epoch_curve
from probcl.eval import SUITES
from probcl.report import plots
from probcl.report.document import Document
from probcl.report.figures import FIGURES, slug

TableHook = Callable[[Document, dict, str], None]
TABLES: Registry[TableHook] = Registry("suite tables")  # suites whose metrics need their own table layout


def format_stat(stat: dict | None) -> str:
    """``mean +- std`` (std only over several seeds); 3 decimals for values in [-1, 1], else 2."""
    if not stat:
        return ""
    digits = 3 if abs(stat["mean"]) <= 1 else 2
    text = f"{stat['mean']:.{digits}f}"
    return text + (f" ± {stat['std']:.{digits}f}" if stat.get("std") is not None else "")


def dotted(tree: dict, prefix: str = "") -> dict:
    """Nested settings as {"section.key": value}."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _cell_eval(root: Path, cell: dict) -> dict:
    return read_json(RunPaths(root / cell["run_dir"]).eval, {})


def _group_cells(results: dict, group: str) -> list[dict]:
    return [c for c in results["cells"] if c["group"] == group and not c["error"]]


def headline_table(doc: Document, results: dict, headline: dict[str, str]) -> None:
    groups = results["groups"]
    columns = {title: key for title, key in headline.items() if any(key in g["metrics"] for g in groups.values())}
    seeds = {name: len(g["cells"]) for name, g in groups.items()}
    doc.table(["method", "seeds", *columns],
              [[name, str(seeds[name]), *(format_stat(g["metrics"].get(key)) for key in columns.values())]
               for name, g in groups.items()])


def suite_tables(doc: Document, results: dict) -> None:
    """One table per suite result key: metrics as rows, methods as columns, unless the suite registers
    its own layout in ``TABLES``."""
    groups = results["groups"]
    keys_of = list(dict.fromkeys(k.split("/")[0] for g in groups.values() for k in g["metrics"]))
    for key in keys_of:
        suite = key.split("@")[0]
        if suite not in SUITES:  # e.g. train/seconds_per_epoch
            continue
        if suite in TABLES:
            TABLES.get(suite)(doc, results, key)
            continue
        metrics = list(dict.fromkeys(k for g in groups.values() for k in g["metrics"] if k.split("/")[0] == key))
        doc.heading(SUITES.get(suite).title + (f" ({key.split('@')[1]} features)" if "@" in key else ""), 3)
        doc.table(["metric", *groups], [[k.split("/", 1)[1], *(format_stat(g["metrics"].get(k)) for g in groups.values())]
                                        for k in metrics])


@TABLES.register("ood")
def ood_tables(doc: Document, results: dict, suite: str) -> None:
    groups = results["groups"]
    entries: dict[tuple[str, str], dict[str, dict]] = {}  # (set, metric) -> {score: {group: stat}}
    for name, g in groups.items():
        for key, stat in g["metrics"].items():
            head, _, rest = key.partition("/")
            if head != suite or not rest.startswith("sets."):
                continue
            set_and_score, _, metric = rest[len("sets."):].rpartition(".")
            set_name, _, score = set_and_score.rpartition(".")
            entries.setdefault((set_name, metric), {}).setdefault(score, {})[name] = stat
    doc.heading(SUITES.get("ood").title, 3)
    doc.paragraph("Outlier scores (higher = more OOD); AUROC/AUPR-out with OOD positive; FPR95 = share of OOD "
                  "accepted when 95% of in-distribution test images are accepted (lower is better).")
    for (set_name, metric), by_score in entries.items():
        if metric not in ("auroc", "fpr95"):
            continue
        doc.paragraph(f"{metric.upper()} against `{set_name}`:")
        doc.table(["method", *by_score], [[name, *(format_stat(by_score[s].get(name)) for s in by_score)] for name in groups])


def figures(doc: Document, results: dict, root: Path) -> None:
    """Training curves, then each benchmarked suite's figures from its registered hook."""
    plot_dir = root / "plots"
    groups = list(results["groups"])
    for key, label in (("monitor/knn_top1", "kNN top-1 % (online monitor)"), ("monitor/probe_top1", "online probe top-1 %")):
        series = {g: _mean_curve([epoch_curve(root / c["run_dir"], key) for c in _group_cells(results, g)]) for g in groups}
        if any(series.values()):
            path = plots.curves({g: [(e + 1, v) for e, v in s] for g, s in series.items()},
                                plot_dir / f"curve-{slug(key)}.png", label, "training curves (mean over seeds)")
            doc.figure(path, f"{label} per epoch, mean over seeds")
    evals = {g: [_cell_eval(root, c) for c in _group_cells(results, g)] for g in groups}
    for suite in results["config"]["suites"]:
        if suite not in FIGURES:
            continue
        per_group = {g: [e[suite] for e in ev if suite in e] for g, ev in evals.items()}
        per_group = {g: runs for g, runs in per_group.items() if runs}
        if per_group:
            for path, caption in FIGURES.get(suite)(per_group, plot_dir):
                doc.figure(path, caption)


def _mean_curve(curves: list[list[tuple[int, float]]]) -> list[tuple[int, float]]:
    epochs = sorted(set.intersection(*(set(dict(c)) for c in curves))) if curves and all(curves) else []
    return [(e, statistics.fmean(dict(c)[e] for c in curves)) for e in epochs]


def write_report(results: dict, root: Path, headline: dict[str, str]) -> tuple[Path, Path]:
    """Build the document and write ``root/report.md`` (figures under ``root/plots``) and ``root/report.html``."""
    doc = Document(results["title"])
    hw = results["hardware"]
    if results["description"]:
        doc.paragraph(results["description"].strip())
    doc.paragraph(f"Hardware: {hw['cpu']} ({hw['cpu_count']} CPUs, {hw['torch_threads']} torch threads)"
                  f"{', GPU ' + hw['gpu'] if hw['gpu'] else ''}; torch {hw['torch']}. Created {results['created']}.")
    overrides = results["config"]["overrides"]
    if overrides:
        doc.paragraph("Common budget (overrides applied to every cell): "
                      + ", ".join(f"`{k}={v}`" for k, v in dotted(overrides).items()) + ".")
    doc.paragraph(f"Seeds: {results['config']['seeds']}; suites: {', '.join(results['config']['suites'])}. "
                  "Cells: mean ± std over seeds (sample std). Accuracies in %, AUROC/ECE as fractions.")
    failed = [c for c in results["cells"] if c["error"]]
    if failed:
        doc.paragraph("Failed cells (left out of the tables): "
                      + "; ".join(f"{c['name']}: {c['error'].splitlines()[0]}" for c in failed))
    doc.heading("Summary")
    headline_table(doc, results, headline)
    doc.heading("Figures")
    figures(doc, results, root)
    doc.heading("All metrics")
    suite_tables(doc, results)
    doc.heading("Protocol")
    doc.paragraph("Each suite records its protocol (probe, k, T, bins, eps, seeds, image counts) under `protocol` "
                  "in the cell's `cells/<cell>/eval.json`; the pretraining config is in `cells/<cell>/config.yaml`.")
    md_path, html_path = root / "report.md", root / "report.html"
    atomic_write_text(md_path, doc.to_markdown(root))
    atomic_write_text(html_path, doc.to_html())
    return md_path, html_path
