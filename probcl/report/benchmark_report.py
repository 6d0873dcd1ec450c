"""The benchmark report: tables (mean +- std over seeds) and figures built from ``results.json``
and the cells' run directories, written as ``report.md`` and a self-contained ``report.html``."""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Optional

from probcl.core.io import atomic_write_text, read_json
from probcl.report import plots
from probcl.report.document import Document
from probcl.core.runs import RunPaths, epoch_curve

HISTOGRAM_SCORES = ("msp", "energy", "knn10")
SUITE_TITLES = {
    "linear": "Linear probe", "knn": "kNN", "calibration": "Calibration", "adversarial": "Adversarial robustness",
    "corruptions": "Corruption robustness", "fewshot": "Few labels", "transfer": "Transfer",
    "efficiency": "Sample efficiency", "lipschitz": "Local Lipschitz estimates",
}


def format_stat(stat: Optional[dict]) -> str:
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


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text).strip("-").lower()


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
    """One table per suite: metrics as rows, methods as columns (OOD: one table per set and metric)."""
    groups = results["groups"]
    suites = list(dict.fromkeys(k.split("/")[0] for g in groups.values() for k in g["metrics"]))
    for suite in suites:
        if suite == "train":
            continue
        if suite.split("@")[0] == "ood":
            ood_tables(doc, results, suite)
            continue
        keys = list(dict.fromkeys(k for g in groups.values() for k in g["metrics"] if k.split("/")[0] == suite))
        doc.heading(SUITE_TITLES.get(suite.split("@")[0], suite), 3)
        doc.table(["metric", *groups], [[k.split("/", 1)[1], *(format_stat(g["metrics"].get(k)) for g in groups.values())]
                                        for k in keys])


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
    doc.heading("Out-of-distribution detection", 3)
    doc.paragraph("Outlier scores (higher = more OOD); AUROC/AUPR-out with OOD positive; FPR95 = share of OOD "
                  "accepted when 95% of in-distribution test images are accepted (lower is better).")
    for (set_name, metric), by_score in entries.items():
        if metric not in ("auroc", "fpr95"):
            continue
        doc.paragraph(f"{metric.upper()} against `{set_name}`:")
        doc.table(["method", *by_score], [[name, *(format_stat(by_score[s].get(name)) for s in by_score)] for name in groups])


def figures(doc: Document, results: dict, root: Path) -> None:
    plot_dir = root / "plots"
    groups = list(results["groups"])
    for key, label in (("monitor/knn_top1", "kNN top-1 % (online monitor)"), ("monitor/probe_top1", "online probe top-1 %")):
        series = {g: _mean_curve([epoch_curve(root / c["run_dir"], key) for c in _group_cells(results, g)]) for g in groups}
        if any(series.values()):
            path = plots.curves({g: [(e + 1, v) for e, v in s] for g, s in series.items()},
                                plot_dir / f"curve-{_slug(key)}.png", label, "training curves (mean over seeds)")
            doc.figure(path, f"{label} per epoch, mean over seeds")
    evals = {g: [_cell_eval(root, c) for c in _group_cells(results, g)] for g in groups}
    adversarial = {g: [e["adversarial"] for e in ev if "adversarial" in e] for g, ev in evals.items()}
    for attack in ("fgsm", "pgd"):
        series = {g: _attack_curve(runs, attack) for g, runs in adversarial.items() if runs}
        if series:
            doc.figure(plots.curves(series, plot_dir / f"adversarial-{attack}.png", "robust top-1 %",
                                    f"{attack.upper()}", xlabel="eps (x 1/255)"), f"{attack.upper()} robust accuracy vs eps")
    corruption = {g: [e["corruptions"] for e in ev if "corruptions" in e] for g, ev in evals.items()}
    series = {g: _severity_curve(runs) for g, runs in corruption.items() if runs}
    if series:
        doc.figure(plots.curves(series, plot_dir / "corruptions.png", "top-1 %", "mean over corruptions",
                                xlabel="severity (0 = clean)"), "corruption accuracy vs severity, mean over corruptions")
    for g, ev in evals.items():
        bins = [e["calibration"]["bins"] for e in ev if "calibration" in e]
        if bins:
            pooled = _pool_bins(bins)
            doc.figure(plots.reliability_diagram(pooled, plot_dir / f"reliability-{_slug(g)}.png", g),
                       f"{g}: reliability diagram (test predictions of all seeds pooled)")
    for g, ev in evals.items():
        hist = next((e["ood"]["histograms"] for e in ev if "ood" in e), None)
        if hist:
            scores = [s for s in hist if s in HISTOGRAM_SCORES or s.startswith("uncertainty")]
            doc.figure(plots.score_histograms(hist, plot_dir / f"ood-{_slug(g)}.png", g, scores),
                       f"{g}: OOD score distributions (first seed)")
    lipschitz_runs = {g: root / cells[0]["run_dir"] for g in groups
                      if (cells := _group_cells(results, g)) and (RunPaths(root / cells[0]["run_dir"]).plots / "lipschitz.npz").exists()}
    if lipschitz_runs:
        from probcl.report.lipschitz import plot_lipschitz_histograms

        doc.figure(plot_lipschitz_histograms(lipschitz_runs, plot_dir / "lipschitz.png"),
                   "local Lipschitz estimates per perturbation (first seed; lower = smoother)")


def _mean_curve(curves: list[list[tuple[int, float]]]) -> list[tuple[int, float]]:
    epochs = sorted(set.intersection(*(set(dict(c)) for c in curves))) if curves and all(curves) else []
    return [(e, statistics.fmean(dict(c)[e] for c in curves)) for e in epochs]


def _attack_curve(runs: list[dict], attack: str) -> list[tuple[float, float]]:
    eps = sorted(float(k[3:]) for k in runs[0][attack])
    points = [(0.0, statistics.fmean(r["clean_top1"] for r in runs))]
    return points + [(e, statistics.fmean(r[attack][f"eps{e:g}"] for r in runs)) for e in eps]


def _severity_curve(runs: list[dict]) -> list[tuple[float, float]]:
    points = [(0, statistics.fmean(r["clean_top1"] for r in runs))]
    for s in range(5):
        points.append((s + 1, statistics.fmean(statistics.fmean(v[s] for v in r["per_severity"].values()) for r in runs)))
    return points


def _pool_bins(bins: list[dict]) -> dict:
    """Reliability bins of several runs merged as if their predictions were one set."""
    n = len(bins[0]["count"])
    count = [sum(b["count"][m] for b in bins) for m in range(n)]
    pooled = {"count": count}
    for key in ("accuracy", "confidence"):
        pooled[key] = [sum(b["count"][m] * b[key][m] for b in bins) / count[m] if count[m] else 0.0 for m in range(n)]
    return pooled


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
