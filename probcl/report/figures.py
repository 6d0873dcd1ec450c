"""Figure hooks: a suite's results -> PNG figures, registered by suite name in ``FIGURES``.

A hook takes ``{label: [suite result, ...]}`` (a label per method, one result per seed; ``probcl
evaluate`` passes one run) and the plot folder, draws what the suite's figure data shows, and
returns ``[(png path, caption)]``. Comparison figures have one file per suite; per-label figures
are named ``<stem>-<label>.png``. Evaluation code never draws: only these hooks do.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

from probcl.core.calibration_bins import calibration_errors
from probcl.core.registry import Registry
from probcl.report import plots
from probcl.report.lipschitz import plot_lipschitz_histograms

Drawn = list[tuple[Path, str]]
FigureHook = Callable[[dict[str, list[dict]], Path], Drawn]
FIGURES: Registry[FigureHook] = Registry("suite figures")
HISTOGRAM_SCORES = ("msp", "energy", "knn10")  # OOD scores drawn besides the method's own uncertainty


def slug(text: str) -> str:
    """``text`` as a file-name part: alphanumerics kept, everything else a dash, lower case."""
    return "".join(c if c.isalnum() else "-" for c in text).strip("-").lower()


def render_run_figures(results: dict[str, dict], label: str, plot_dir: Path) -> Drawn:
    """The figures of one run's suite results ``{suite: result}`` (suites without a hook are skipped)."""
    drawn: Drawn = []
    for suite, result in results.items():
        if suite in FIGURES:
            drawn += FIGURES.get(suite)({label: [result]}, plot_dir)
    return drawn


@FIGURES.register("calibration")
def calibration_figures(results: dict[str, list[dict]], plot_dir: Path) -> Drawn:
    """A reliability diagram per label, the test predictions of all its results pooled."""
    drawn = []
    for label, runs in results.items():
        pooled = pool_bins([r["bins"] for r in runs])
        ece, mce = calibration_errors(pooled)
        path = plots.reliability_diagram(
            pooled, plot_dir / f"reliability-{slug(label)}.png", f"{label}: ECE {ece:.3f}, MCE {mce:.3f}"
        )
        drawn.append((path, f"{label}: reliability diagram (test predictions of all seeds pooled)"))
    return drawn


@FIGURES.register("adversarial")
def adversarial_figures(results: dict[str, list[dict]], plot_dir: Path) -> Drawn:
    """Accuracy on attacked images vs eps, one curve per label (mean over its results), for FGSM and PGD;
    and the same for robust accuracy (correct clean and attacked) where the results have it."""
    drawn = []
    for attack in ("fgsm", "pgd", "fgsm_robust", "pgd_robust"):
        if not all(attack in r for runs in results.values() for r in runs):
            continue
        name = attack.replace("_robust", "").upper()
        what = "robust top-1 % (clean and attacked correct)" if attack.endswith("_robust") else "top-1 % on attacked"
        series = {label: attack_curve(runs, attack) for label, runs in results.items()}
        path = plots.curves(series, plot_dir / f"adversarial-{attack}.png", what, name, xlabel="eps (x 1/255)")
        drawn.append((path, f"{name} {what} vs eps"))
    return drawn


@FIGURES.register("corruptions")
def corruptions_figures(results: dict[str, list[dict]], plot_dir: Path) -> Drawn:
    """Accuracy vs corruption severity (mean over corruptions and results), one curve per label."""
    series = {label: severity_curve(runs) for label, runs in results.items()}
    path = plots.curves(
        series, plot_dir / "corruptions.png", "top-1 %", "mean over corruptions", xlabel="severity (0 = clean)"
    )
    return [(path, "corruption accuracy vs severity, mean over corruptions")]


@FIGURES.register("ood")
def ood_figures(results: dict[str, list[dict]], plot_dir: Path) -> Drawn:
    """Per label, the score distributions of the ID and OOD sets (first result)."""
    drawn = []
    for label, runs in results.items():
        hist = runs[0]["histograms"]
        scores = [s for s in hist if s in HISTOGRAM_SCORES or s.startswith("uncertainty")]
        path = plots.score_histograms(hist, plot_dir / f"ood-{slug(label)}.png", label, scores)
        drawn.append((path, f"{label}: OOD score distributions (first seed)"))
    return drawn


@FIGURES.register("lipschitz")
def lipschitz_figures(results: dict[str, list[dict]], plot_dir: Path) -> Drawn:
    """Local Lipschitz histograms per perturbation, every label in each panel (first result)."""
    path = plot_lipschitz_histograms({label: runs[0] for label, runs in results.items()}, plot_dir / "lipschitz.png")
    return [(path, "local Lipschitz estimates per perturbation (first seed; lower = smoother)")]


def attack_curve(runs: list[dict], attack: str) -> list[tuple[float, float]]:
    """(eps, mean top-1) points of ``attack`` (a result key: fgsm, pgd, fgsm_robust, ...), from (0, clean top-1)."""
    eps = sorted(float(k[3:]) for k in runs[0][attack])
    points = [(0.0, statistics.fmean(r["clean_top1"] for r in runs))]
    return points + [(e, statistics.fmean(r[attack][f"eps{e:g}"] for r in runs)) for e in eps]


def severity_curve(runs: list[dict]) -> list[tuple[float, float]]:
    """(severity, mean top-1 over corruptions and runs) points, severity 0 = clean."""
    points = [(0.0, statistics.fmean(r["clean_top1"] for r in runs))]
    for s in range(5):
        points.append(
            (s + 1.0, statistics.fmean(statistics.fmean(v[s] for v in r["per_severity"].values()) for r in runs))
        )
    return points


def pool_bins(bins: list[dict]) -> dict:
    """Reliability bins of several runs merged as if their predictions were one set."""
    n = len(bins[0]["count"])
    count = [sum(b["count"][m] for b in bins) for m in range(n)]
    pooled: dict[str, list] = {"count": count}
    for key in ("accuracy", "confidence"):
        pooled[key] = [sum(b["count"][m] * b[key][m] for b in bins) / count[m] if count[m] else 0.0 for m in range(n)]
    return pooled
