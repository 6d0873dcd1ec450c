"""The benchmark report: tables (mean +- std over seeds) and figures built from ``results.json``
and the cells' run directories, written as ``report.md`` and a self-contained ``report.html``."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import yaml

from probcl.config import dotted, recipe
from probcl.core.io import atomic_write_text, read_json
from probcl.core.layout import RunPaths
from probcl.core.metrics_file import epoch_curve
from probcl.errors import ConfigError
from probcl.report import plots
from probcl.report.budgets import Budget, budgets_markdown, budgets_section
from probcl.report.claim_stats import BEYOND, ClaimResult, span
from probcl.report.claims import evaluate_claims
from probcl.report.controls import controls_table
from probcl.report.document import Document
from probcl.report.figures import FIGURES, slug
from probcl.report.tables import format_stat, suite_tables


def _cell_eval(root: Path, cell: dict) -> dict:
    return read_json(RunPaths(root / cell["run_dir"]).eval, {})


def _group_cells(results: dict, group: str) -> list[dict]:
    return [c for c in results["cells"] if c["group"] == group and not c["error"]]


def headline_table(doc: Document, results: dict, headline: dict[str, str]) -> None:
    groups = results["groups"]
    columns = {title: key for title, key in headline.items() if any(key in g["metrics"] for g in groups.values())}
    seeds = {name: len(g["cells"]) for name, g in groups.items()}
    doc.table(
        ["method", "seeds", *columns],
        [
            [name, str(seeds[name]), *(format_stat(g["metrics"].get(key)) for key in columns.values())]
            for name, g in groups.items()
        ],
    )


def verdict_table(doc: Document, verdicts: list[ClaimResult]) -> None:
    """One row per claim: its verdict, the comparison that decides it (the weakest of the paper-kind ones) with its
    reason, and the stress-set comparisons beyond the paper (findings that never decide the verdict)."""
    rows = []
    for r in verdicts:
        decisive = r.deciding
        if decisive is None or decisive.mean is None:
            evidence, why = "—", "no seed has every cell this claim needs yet."
        else:
            evidence, why = decisive.describe(), decisive.reason()
        beyond = "; ".join(
            f"{c.label.rsplit(', ', 1)[-1]}: {c.verdict}" for c in r.beyond_the_paper if c.mean is not None
        )
        rows.append([f"{r.claim.paper}: {r.claim.statement}", f"**{r.verdict}**", evidence, why, beyond or "—"])
    doc.table(
        [
            "claim",
            "verdict",
            "deciding comparison (the paper's kind of evidence): mean difference, paired and Welch intervals",
            "why",
            "beyond the paper (stress sets; not in the verdict)",
        ],
        rows,
    )


def _one_of_the_budgets(results: dict, budgets: list[Budget]) -> bool:
    """Whether ``results`` are one budget's: then the budget table gives their verdicts."""
    return any(b.results == results for b in budgets)


def study_summary_markdown(results: dict, budgets: list[Budget] | None = None) -> str:
    """The headline table and the claims' verdicts of a benchmark's results.json content, as a Markdown block
    (what the docs' study page shows; ``scripts/readme_study.py`` pastes it in), then the verdicts at each of
    ``budgets`` side by side (the verdict table only when ``results`` are not one budget's)."""
    doc = Document(results["title"])
    headline_table(doc, results, results["config"]["headline"])
    if results["config"].get("claims") and not _one_of_the_budgets(results, budgets or []):
        verdict_table(doc, evaluate_claims(results))
    if budgets:
        budgets_markdown(doc, budgets)
    if results["config"].get("controls"):
        controls_table(doc, results, _metric_names(results))
    return doc.to_markdown(Path("."), title=False)


def study_short_markdown(
    results: dict, groups: list[str], columns: list[str], budgets: list[Budget] | None = None
) -> str:
    """A short view of a study (the README's): the headline ``columns`` (their titles) of the ``groups`` (methods)
    named, then one row per claim with its verdict and the comparison that decides it (only when ``results`` are
    not one of the ``budgets``'), then each claim's verdicts at the ``budgets`` side by side."""
    unknown = [g for g in groups if g not in results["groups"]] + [
        c for c in columns if c not in results["config"]["headline"]
    ]
    if unknown:
        raise ConfigError(f"not in the study's results: {', '.join(unknown)}; see its results.json groups and headline")
    doc = Document(results["title"])
    headline = {title: results["config"]["headline"][title] for title in columns}
    headline_table(doc, {**results, "groups": {g: results["groups"][g] for g in groups}}, headline)
    if results["config"].get("claims") and not _one_of_the_budgets(results, budgets or []):
        rows = [
            [
                f"{r.claim.paper}: {r.claim.statement}",
                f"**{r.verdict}**",
                r.deciding.describe() if r.deciding and r.deciding.mean is not None else "—",
            ]
            for r in evaluate_claims(results)
        ]
        doc.table(["claim", "verdict", "deciding comparison: mean difference, paired and Welch intervals"], rows)
    if budgets:
        budgets_markdown(doc, budgets)
    return doc.to_markdown(Path("."), title=False)


def _metric_names(results: dict) -> dict[str, str]:
    """Metric key -> the headline's column title for it (keys not in the headline keep their key)."""
    return {key: title for title, key in results["config"]["headline"].items()}


CONTROLS_PARAGRAPH = (
    "Each control changes one setting of a method. Difference = control minus the compared method, averaged "
    "over the seeds both have. With two or more seeds: the 95 % Student-t interval of the paired differences. "
    "With one seed: the noise band 2 x sqrt(2) x the compared method's seed-to-seed std, the spread of a "
    "difference between two independent runs; the band comes from three seeds and is itself rough, so a "
    "one-seed control gives a reading, not a verdict."
)


def claims_section(doc: Document, results: dict) -> None:
    """Each configured claim: the paper's numbers, ours, the paired difference over seeds and the verdict."""
    groups = results["groups"]
    doc.paragraph(
        "Each comparison is analysed twice: *paired* (the two-sided Student-t interval of the mean of the per-seed "
        "differences, the cells of one seed paired) and *Welch* (the unpaired interval of the difference of the two "
        "arms' means, their variances estimated separately); positive supports the claim. Each interval gives a "
        "verdict: *reproduced* (above 0, or above -margin for 'no worse than' claims), *contradicted* (below 0, or "
        "below -margin), *not reproduced* (neither, and the paper's effect lies above it), *inconclusive at this "
        "budget* (otherwise, or a single seed). A comparison is reproduced or contradicted only when both analyses "
        "agree; otherwise it is inconclusive, and the reason says so. The comparisons that decide a claim are "
        "Holm-corrected for their number: ordered by p-value (the larger of the two analyses' test of no "
        "difference), the k-th of m gets intervals at 1 - 0.05 / (m - k + 1) until one is not significant, and "
        "every later one keeps that level. An arm that is one number in every seed (a constant such as chance, or "
        "the deep ensemble of all seeds) is named as that number, not given a spread; a value that is a code in "
        "some seed (e.g. 'never reached', coded 1.5) gets no interval, only the count of seeds. The papers' "
        "settings (datasets, networks, epochs) differ from ours. "
        "A claim is judged on the paper's kind of evidence only (e.g. natural-image dataset shifts for OOD: "
        "held-out classes and digits): its verdict is the weakest of those comparisons'. Stress sets the paper "
        "never used (synthetic noise, inverted images) are reported beside it as findings beyond the paper "
        "(uncorrected 95 % intervals)."
    )
    verdicts = evaluate_claims(results)
    verdict_table(doc, verdicts)
    for r in verdicts:
        doc.heading(f"{r.claim.paper}: {r.claim.statement}", 3)
        doc.paragraph(f"Paper: {r.claim.paper_numbers}." + (f" {r.claim.notes}" if r.claim.notes else ""))
        rows = []
        for c in r.comparisons:
            ours = "; ".join(
                f"{g} {k}: {format_stat(groups.get(g, {}).get('metrics', {}).get(k)) or 'n/a'}" for g, k in c.shown
            )
            mean = f"{c.mean:+.3g}" if c.mean is not None else "—"
            kind = "beyond the paper" if c.evidence == BEYOND else "paper's kind"
            level = f"{100 * c.level:.3g} %" + (f" (Holm, {c.family})" if c.family > 1 else "") if c.measured else "—"
            paired, welch = (
                f"{span(i)}: {v}" if i else "—" for i, v in ((c.interval, c.paired_verdict), (c.welch, c.welch_verdict))
            )
            rows.append(
                [c.label, kind, ours or "—", str(len(c.seeds)), mean, level, paired, welch, c.verdict, c.reason()]
            )
        doc.table(
            [
                "comparison",
                "evidence",
                "ours (mean ± std over seeds)",
                "seeds",
                "difference",
                "level",
                "paired interval",
                "Welch interval",
                "verdict",
                "why",
            ],
            rows,
        )


def figures(doc: Document, results: dict, root: Path) -> None:
    """Training curves, then each benchmarked suite's figures from its registered hook."""
    plot_dir = root / "plots"
    groups = list(results["groups"])
    for key, label in (
        ("monitor/knn_top1", "kNN top-1 % (online monitor)"),
        ("monitor/probe_top1", "online probe top-1 %"),
    ):
        series = {
            g: _mean_curve([epoch_curve(root / c["run_dir"], key) for c in _group_cells(results, g)]) for g in groups
        }
        if any(series.values()):
            path = plots.curves(
                {g: [(e + 1, v) for e, v in s] for g, s in series.items()},
                plot_dir / f"curve-{slug(key)}.png",
                label,
                "training curves (mean over seeds)",
            )
            doc.figure(path, f"{label} per epoch, mean over seeds")
    batch_sweep_figure(doc, results, root)
    evals = {g: [_cell_eval(root, c) for c in _group_cells(results, g)] for g in groups}
    for suite in results["config"]["suites"]:
        if suite not in FIGURES:
            continue
        per_group = {g: [e[suite] for e in ev if suite in e] for g, ev in evals.items()}
        per_group = {g: runs for g, runs in per_group.items() if runs}
        if per_group:
            for path, caption in FIGURES.get(suite)(per_group, plot_dir):
                doc.figure(path, caption)


SWEEP_METRICS = {"linear/top1": "linear top-1 %", "knn/top1": "kNN top-1 %"}


def batch_sweeps(results: dict, root: Path) -> dict[str, list[tuple[int, str]]]:
    """The batch-size sweeps, ``{line label: [(batch size, group), ...]}`` sorted by batch size: the benchmark's
    ``sweeps`` where it declares them, else the families of groups trained with the same config except the batch
    size and seed (e.g. ``simclr``, ``simclr-b16``, ``simclr-b64``), keyed by the family's first group. Only lines
    with two or more batch sizes; configs are read from the cells' config.yaml."""
    trained = {group: _batch_and_recipe(results, root, group) for group in results["groups"]}
    trained_at = {group: found for group, found in trained.items() if found is not None}
    declared = results.get("config", {}).get("sweeps") or {}
    if declared:
        lines = {label: sorted((trained_at[g][0], g) for g in gs if g in trained_at) for label, gs in declared.items()}
    else:
        families: dict[str, list[tuple[int, str]]] = {}
        for group, (batch, config) in trained_at.items():
            families.setdefault(config, []).append((batch, group))
        lines = {members[0][1]: sorted(members) for members in families.values()}
    return {label: members for label, members in lines.items() if len({batch for batch, _ in members}) > 1}


def _batch_and_recipe(results: dict, root: Path, group: str) -> tuple[int, str] | None:
    """A group's batch size and its config without batch size and seed (as sorted JSON), None if not on disk."""
    cells = _group_cells(results, group)
    config_path = RunPaths(root / cells[0]["run_dir"]).config if cells else None
    if config_path is None or not config_path.is_file():
        return None
    config = recipe(yaml.safe_load(config_path.read_text()))
    batch = config["train"].pop("batch_size")
    config["train"].pop("seed")
    return batch, json.dumps(config, sort_keys=True, default=str)


def batch_sweep_figure(doc: Document, results: dict, root: Path) -> None:
    """Accuracy against batch size, mean +- std over seeds, one line per family of :func:`batch_sweeps`."""
    sweeps = batch_sweeps(results, root)
    grid = []
    for key, label in SWEEP_METRICS.items():
        series = {}
        for family, members in sweeps.items():
            stats = [(batch, results["groups"][group]["metrics"].get(key)) for batch, group in members]
            series[family] = [(b, s["mean"], s["std"] or 0.0) for b, s in stats if s is not None]
        if any(len(points) > 1 for points in series.values()):
            grid.append((label, series, label))
    if grid:
        path = plots.panels(
            grid, root / "plots" / "batch-sweep.png", "accuracy vs batch size", xlabel="batch size", log2_x=True
        )
        doc.figure(path, "Accuracy vs pretraining batch size (mean ± std over seeds; otherwise identical configs)")


def _mean_curve(curves: list[list[tuple[int, float]]]) -> list[tuple[int, float]]:
    epochs = sorted(set.intersection(*(set(dict(c)) for c in curves))) if curves and all(curves) else []
    return [(e, statistics.fmean(dict(c)[e] for c in curves)) for e in epochs]


def _machine(hw: dict) -> str:
    return (
        f"{hw['cpu']} ({hw['cpu_count']} CPUs, {hw['torch_threads']} torch threads)"
        f"{', GPU ' + hw['gpu'] if hw['gpu'] else ''}; torch {hw['torch']}"
    )


def provenance_paragraph(results: dict) -> str:
    """Where the cells ran, as each recorded it (results.json's ``provenance``); results written before cells
    recorded their own give the one machine and date they were stamped with."""
    if "provenance" not in results:
        return f"Hardware: {_machine(results['hardware'])}. Created {results['created']}."
    summary = results["provenance"]
    parts = [f"{_machine(m)}: {m['cells']} cell{'s' * (m['cells'] != 1)}" for m in summary["machines"]]
    if summary["not_recorded"]:
        parts.append(f"not recorded (cells from before each cell recorded its machine): {summary['not_recorded']}")
    dates = (
        f" Cells finished {summary['first_finished']} to {summary['last_finished']}."
        if summary["first_finished"]
        else ""
    )
    return "Hardware, as each cell ran (its `cell.json` provenance): " + "; ".join(parts) + "." + dates


def report_document(
    results: dict, root: Path, headline: dict[str, str], budgets: list[Budget] | None = None
) -> Document:
    """The report as a :class:`Document` (figures drawn under ``root/plots``); with two or more ``budgets`` (this
    study's among them), a section of each claim's verdicts at each."""
    doc = Document(results["title"])
    if results["description"]:
        doc.paragraph(results["description"].strip())
    doc.paragraph(provenance_paragraph(results))
    overrides = results["config"]["overrides"]
    if overrides:
        doc.paragraph(
            "Common budget (overrides applied to every cell): "
            + ", ".join(f"`{k}={v}`" for k, v in dotted(overrides).items())
            + "."
        )
    doc.paragraph(
        f"Seeds: {results['config']['seeds']}; suites: {', '.join(results['config']['suites'])}. "
        "Cells: mean ± std over seeds (sample std). Accuracies in %, AUROC/ECE as fractions."
    )
    failed = [c for c in results["cells"] if c["error"]]
    if failed:
        doc.paragraph(
            "Failed cells (left out of the tables): "
            + "; ".join(f"{c['name']}: {c['error'].splitlines()[0]}" for c in failed)
        )
    doc.heading("Summary")
    headline_table(doc, results, headline)
    if results["config"].get("claims"):
        doc.heading("Claims")
        claims_section(doc, results)
    if budgets and len(budgets) > 1:
        doc.heading("Budgets")
        budgets_section(doc, budgets, root / "plots")
    if results["config"].get("controls"):
        doc.heading("Controls")
        doc.paragraph(CONTROLS_PARAGRAPH)
        controls_table(doc, results, _metric_names(results))
    doc.heading("Figures")
    figures(doc, results, root)
    doc.heading("All metrics")
    suite_tables(doc, results)
    doc.heading("Protocol")
    doc.paragraph(
        "Each suite records its protocol (probe, k, T, bins, eps, seeds, image counts) under `protocol` "
        "in the cell's `cells/<cell>/eval.json`; the pretraining config is in `cells/<cell>/config.yaml`."
    )
    return doc


def write_report(
    results: dict, root: Path, headline: dict[str, str], budgets: list[Budget] | None = None
) -> tuple[Path, Path]:
    """Build the document and write ``root/report.md`` (figures under ``root/plots``) and ``root/report.html``."""
    return write_document(report_document(results, root, headline, budgets), root)


def write_document(doc: Document, root: Path) -> tuple[Path, Path]:
    """Write a report's ``root/report.md`` (figures linked relative to ``root``) and ``root/report.html``."""
    md_path, html_path = root / "report.md", root / "report.html"
    atomic_write_text(md_path, doc.to_markdown(root))
    atomic_write_text(html_path, doc.to_html())
    return md_path, html_path
