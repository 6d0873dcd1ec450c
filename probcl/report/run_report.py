"""The report of one run: training curves from ``metrics.jsonl``, every evaluated suite's table and
figures from ``eval.json``, and the embedding map; written as ``RUN/report.md`` (figures in
``RUN/plots``) and a self-contained ``RUN/report.html`` (figures embedded)."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from probcl.config import dotted
from probcl.core.io import atomic_write_text
from probcl.core.layout import RunPaths, read_evaluations
from probcl.core.metrics_file import read_metrics
from probcl.errors import ConfigError
from probcl.report import plots
from probcl.report.document import Document
from probcl.report.figures import FIGURES
from probcl.report.tables import run_groups, suite_table, suite_title

Points = list[tuple[float, float]]


@dataclass(frozen=True)
class CurveGroup:
    """Columns of metrics.jsonl drawn in one figure: those ``wanted`` and not taken by an earlier group."""

    title: str
    stem: str  # file name: plots/training-<stem>.png
    wanted: Callable[[str], bool]
    per_epoch: bool = False  # x axis: epochs completed (else: optimiser step)
    one_panel: bool = False  # all columns in one panel (same unit); else one panel per column family
    unit: str = ""  # the y axis label of a one-panel group (else each panel's, from unit_of)


# y axis labels by a column's name: the unit where the name tells it, else the quantity as logged
UNITS = (("seconds", "seconds"), ("share", "fraction of the run's time"), ("top1", "%"), ("top5", "%"))


def unit_of(column: str) -> str:
    """The y label of a metrics.jsonl column's panel: its unit when its name tells it (``*seconds``, ``*top1``,
    ...), else the column's own name (a method diagnostic is plotted in the unit it is logged in)."""
    return next((unit for suffix, unit in UNITS if column.endswith(suffix)), f"{_short(column)} (as logged)")


# metrics.jsonl columns "NAME/LO to HI" are the bins [LO, HI) of a histogram logged every step (e.g. TaU's
# train/u_hist): drawn as one heatmap per NAME over training, not as curves
_EDGE = r"-?(?:inf|\d+(?:\.\d+)?(?:e[-+]?\d+)?)"
HISTOGRAM_BIN = re.compile(rf"^(?P<name>.+)/(?P<lo>{_EDGE}) to (?P<hi>{_EDGE})$")

CURVE_GROUPS = (
    CurveGroup("objective", "loss", lambda k: k.startswith("train/") and k.endswith("loss") and "probe" not in k),
    CurveGroup("learning rate", "lr", lambda k: k.startswith("lr-"), one_panel=True, unit="learning rate"),
    CurveGroup(
        "online monitor accuracy (%)",
        "monitor",
        lambda k: k.startswith("monitor/") and "top" in k,
        per_epoch=True,
        one_panel=True,
        unit="accuracy (%)",
    ),
    CurveGroup("online probe on training batches", "probe", lambda k: k.startswith("train/probe")),
    CurveGroup("method diagnostics", "diagnostics", lambda k: k.startswith("train/")),
    CurveGroup("online monitor cost", "monitor-cost", lambda k: k.startswith("monitor/"), per_epoch=True),
    CurveGroup("other metrics", "other", lambda k: True),
)


def metric_columns(rows: list[dict]) -> dict[str, dict[str, Points]]:
    """``{column: {"step": points, "epoch": points}}`` of every numeric column; x = optimiser step, or epochs
    completed for rows that carry an epoch. A step logged twice keeps its last value; non-finite values are left out."""
    columns: dict[str, dict[str, dict[float, float]]] = {}
    for row in rows:
        for key, value in row.items():
            if key in ("step", "epoch") or not isinstance(value, (int, float)) or not math.isfinite(value):
                continue
            axes = columns.setdefault(key, {"step": {}, "epoch": {}})
            if row.get("step") is not None:
                axes["step"][float(row["step"])] = float(value)
            if row.get("epoch") is not None:
                axes["epoch"][float(row["epoch"]) + 1] = float(value)
    return {key: {axis: sorted(points.items()) for axis, points in axes.items()} for key, axes in columns.items()}


def curve_panels(columns: dict[str, dict[str, Points]]) -> list[tuple[CurveGroup, list[tuple[str, dict, str]]]]:
    """Columns sorted into :data:`CURVE_GROUPS`, each as panels ``(title, {column: points}, ylabel)``. Columns
    that share a stem (``train/energy_data``, ``train/energy_samples``) share a panel."""
    left = sorted(columns)
    grouped = []
    for group in CURVE_GROUPS:
        mine = [k for k in left if group.wanted(k)]
        left = [k for k in left if k not in mine]
        axis = "epoch" if group.per_epoch else "step"
        series = {k: columns[k][axis] or columns[k]["step"] for k in mine}
        series = {k: v for k, v in series.items() if v}
        if not series:
            continue
        if group.one_panel:
            panels = [(group.title, {_short(k): v for k, v in series.items()}, group.unit)]
        else:
            stems = {k: k.rpartition("_")[0] or k for k in series}
            families: dict[str, list[str]] = {}
            for k in series:
                families.setdefault(stems[k] if list(stems.values()).count(stems[k]) > 1 else k, []).append(k)
            panels = [
                (_short(family), {_short(k): series[k] for k in members}, unit_of(members[0]))
                for family, members in families.items()
            ]
        grouped.append((group, panels))
    return grouped


def _short(column: str) -> str:
    return column.split("/", 1)[1] if column.startswith(("train/", "monitor/")) else column


def histograms_over_training(columns: dict[str, dict[str, Points]]) -> dict[str, tuple[list[float], list[str], list]]:
    """The histogram columns (:data:`HISTOGRAM_BIN`) grouped by name: ``{name: (steps, bin labels, shares)}`` with
    bins ordered by their lower edge and ``shares[i][j]`` = bin j at ``steps[i]`` (steps where every bin was logged)."""
    found: dict[str, list[tuple[float, str, dict[float, float]]]] = {}
    for key, axes in columns.items():
        match = HISTOGRAM_BIN.match(key)
        if match:
            label = f"[{match['lo']}, {match['hi']})"
            found.setdefault(match["name"], []).append((float(match["lo"]), label, dict(axes["step"])))
    out = {}
    for name, bins in found.items():
        bins.sort(key=lambda b: b[0])
        steps = sorted(set.intersection(*(set(points) for _, _, points in bins)))
        out[name] = (steps, [label for _, label, _ in bins], [[points[s] for _, _, points in bins] for s in steps])
    return out


def training_section(doc: Document, rows: list[dict], plot_dir: Path) -> None:
    """One figure per group of metrics.jsonl columns, and one heatmap per histogram logged over training."""
    if not rows:
        doc.paragraph("No training metrics (`metrics.jsonl` is missing or empty).")
        return
    columns = metric_columns(rows)
    curves = {key: value for key, value in columns.items() if not HISTOGRAM_BIN.match(key)}
    for group, panels in curve_panels(curves):
        xlabel = "epochs completed" if group.per_epoch else "optimiser step"
        path = plots.panels(
            panels, plot_dir / f"training-{group.stem}.png", group.title, xlabel=xlabel, whole_x=group.per_epoch
        )
        doc.figure(path, f"{group.title} per {'epoch' if group.per_epoch else 'logged step'}")
    for name, (steps, bins, shares) in histograms_over_training(columns).items():
        if not steps:
            continue
        short = _short(name)
        path = plots.histogram_over_time(
            steps, bins, shares, plot_dir / f"training-hist-{short.replace('/', '-')}.png", f"{short} over training"
        )
        doc.figure(path, f"histogram of {short} per logged step (colour: share of the batch in each bin)")


def embedding_section(doc: Document, embedding: dict | None, plot_dir: Path, label: str) -> None:
    """The t-SNE map of test features coloured by class (see :mod:`probcl.eval.embedding_map`)."""
    if embedding is None:
        doc.paragraph("No embedding map (written by `probcl evaluate` unless `--no-report`).")
        return
    p = embedding["protocol"]
    path = plots.embedding_scatter(
        embedding["points"],
        embedding["labels"],
        plot_dir / "embedding-map.png",
        f"{label}: {p['feature_layer']} features, {p['images']} test images",
        p.get("class_names"),
    )
    doc.figure(
        path,
        f"{p['method']}; {p['images']} {p['dataset']} test images (seed {p['seed']}), "
        f"perplexity {p['perplexity']:g}, coloured by class",
    )


def evaluation_section(doc: Document, evaluations: dict[str, dict], plot_dir: Path, label: str) -> None:
    """An overview (checkpoint and time per suite), then per result key its table(s) and figures."""
    if not evaluations:
        doc.paragraph("No suite evaluated yet: `probcl evaluate RUN --suite linear,knn` (or `all`).")
        return
    doc.table(
        ["suite", "result key", "epochs completed", "step", "seconds"],
        [
            [suite_title(key), key, *_checkpoint(r), str(r.get("protocol", {}).get("seconds", ""))]
            for key, r in evaluations.items()
        ],
    )
    groups = {"groups": run_groups(label, evaluations)}
    for key, result in evaluations.items():
        suite, _, layer = key.partition("@")
        suite_table(doc, groups, key)
        if suite not in FIGURES:
            continue
        try:
            drawn = FIGURES.get(suite)(
                {label + (f"@{layer}" if layer else ""): [result]}, plot_dir / layer if layer else plot_dir
            )
        except (KeyError, IndexError, ConfigError) as e:  # a result from an older version without figure data
            doc.paragraph(f"The figures of `{key}` could not be drawn ({type(e).__name__}: {e}); run the suite again.")
            continue
        for path, caption in drawn:
            doc.figure(path, caption)


def _checkpoint(result: dict) -> list[str]:
    """The evaluated checkpoint's epochs completed and optimiser step. Results recorded before ``epochs_completed``
    was kept show none: their ``epoch`` is Lightning's 0-based counter, one less than the epochs of an epoch-end
    checkpoint and equal to them mid-epoch, so it cannot be told which."""
    meta = result.get("protocol", {}).get("checkpoint")
    if not isinstance(meta, dict):
        return ["", ""]
    return [str(meta.get("epochs_completed", "")), str(meta.get("global_step", ""))]


def write_run_report(run_dir: str | Path, embedding: dict | None = None, name: str | None = None) -> tuple[Path, Path]:
    """Write ``RUN/report.md`` (figures under ``RUN/plots``) and ``RUN/report.html`` from the run's files;
    ``name``: what was evaluated, for a folder without config.yaml (a foreign encoder's results)."""
    paths = RunPaths(Path(run_dir))
    config = yaml.safe_load(paths.config.read_text()) if paths.config.exists() else {}
    evaluations = read_evaluations(paths.eval)
    method = config.get("method", name or "encoder")
    dataset = config.get("data", {}).get("dataset") or (embedding or {}).get("protocol", {}).get("dataset", "")
    doc = Document(f"{paths.root.name}: {method}" + (f" on {dataset}" if dataset else ""))
    doc.paragraph(_summary(paths, config, method) + f" Report written {time.strftime('%Y-%m-%d %H:%M:%S')}.")
    rows = read_metrics(paths.root)
    doc.heading("Summary")
    doc.table(["", ""], summary_rows(config, evaluations, rows))
    doc.heading("Training")
    training_section(doc, rows, paths.plots)
    doc.heading("Embedding map")
    embedding_section(doc, embedding, paths.plots, method)
    doc.heading("Evaluation")
    evaluation_section(doc, evaluations, paths.plots, method)
    if config:
        doc.heading("Configuration")
        doc.table(["setting", "value"], [[k, str(v)] for k, v in dotted(config).items()])
    md_path, html_path = paths.report, paths.report.with_suffix(".html")
    atomic_write_text(md_path, doc.to_markdown(paths.root))
    atomic_write_text(html_path, doc.to_html())
    return md_path, html_path


def summary_rows(config: dict, evaluations: dict[str, dict], rows: list[dict]) -> list[list[str]]:
    """The report's opening table: method, data, budget, then the headline metrics evaluated so far."""
    out = []
    if config:
        model, train, data = config.get("model", {}), config.get("train", {}), config.get("data", {})
        steps = max((int(r["step"]) for r in rows if isinstance(r.get("step"), (int, float))), default=None)
        subset = f", a {data['train_subset']}-image subset" if data.get("train_subset") else ""
        out += [
            ["method", f"`{config.get('method')}`"],
            ["data", f"`{data.get('dataset')}`{subset}"],
            ["backbone", f"`{model.get('backbone')}` (width {model.get('width')})"],
            [
                "budget",
                f"{train.get('epochs')} epochs at batch {train.get('batch_size')}"
                + (f": {steps} optimiser steps logged" if steps is not None else ""),
            ],
        ]
        final = [r["monitor/knn_top1"] for r in rows if isinstance(r.get("monitor/knn_top1"), (int, float))]
        if final:
            out.append(["online kNN monitor, last epoch", f"{final[-1]:.2f} %"])
    described = len(out)
    headline = (
        ("linear", "top1", "linear probe top-1", "{:.2f} %"),
        ("knn", "top1", "weighted kNN top-1", "{:.2f} %"),
        ("calibration", "ece", "ECE (linear probe)", "{:.3f}"),
        ("corruptions", "mean_top1", "mean top-1 under corruptions", "{:.2f} %"),
    )
    for suite, key, title, form in headline:
        value = evaluations.get(suite, {}).get(key)
        if isinstance(value, (int, float)):
            out.append([title, form.format(value)])
    for name, scores in evaluations.get("ood", {}).get("sets", {}).items():
        auroc = scores.get("combined", {}).get("auroc") if isinstance(scores, dict) else None
        if isinstance(auroc, (int, float)):
            out.append([f"OOD AUROC of the combined score, {name}", f"{auroc:.3f}"])
    if len(out) == described:
        out.append(["evaluation", "none yet: `probcl evaluate RUN --suite linear,knn`"])
    return out


def _summary(paths: RunPaths, config: dict, name: str) -> str:
    if not config:
        return f"Evaluations of `{name}` in `{paths.root}` (not a probcl run: no config.yaml)."
    model, train = config.get("model", {}), config.get("train", {})
    dataset = config.get("data", {}).get("dataset")
    return (
        f"Run directory `{paths.root}`: method `{config.get('method')}` on `{dataset}`, "
        f"backbone `{model.get('backbone')}`, {train.get('epochs')} epochs of batch {train.get('batch_size')}, "
        f"seed {train.get('seed')}. Tables: the metrics of `eval.json` (accuracies in %, AUROC/ECE as "
        f"fractions); each suite's protocol is recorded there."
    )
