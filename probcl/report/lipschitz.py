"""Histograms of local Lipschitz estimates for one or several runs (the CEB paper's Figures 3-4),
drawn from the figure data of the ``lipschitz`` suite's results."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from matplotlib.figure import Figure

from probcl.errors import ConfigError
from probcl.report.plots import save_figure

QUANTITIES = {
    "sampled": "|log e(z|x) - log e(z|x+dx)| / ||dx||  (Eq. 19)",
    "kl_bound": "sqrt(max KL) / ||dx||  (Eq. 36)",
}
MEAN_KEYS = {"sampled": "{}", "kl_bound": "{} kl_bound"}  # where a result keeps each quantity's mean


def plot_lipschitz_histograms(
    results: Mapping[str, dict], path: str | Path, quantity: str = "sampled", title: str = ""
) -> Path:
    """One panel per perturbation; each labelled result's density histogram of ``quantity`` with its mean
    in the legend. ``results``: ``{label: lipschitz suite result}``. Lower values = smoother encoder."""
    if quantity not in QUANTITIES:
        raise ConfigError(f"quantity must be one of {', '.join(QUANTITIES)}, got {quantity!r}")
    histograms = {label: r["histograms"][quantity] for label, r in results.items()}
    names = list(dict.fromkeys(n for per_run in histograms.values() for n in per_run))
    if not names:
        raise ConfigError("no Lipschitz histogram to plot: the results hold no perturbation pairs")
    cols = min(4, len(names))
    rows = -(-len(names) // cols)
    fig = Figure(figsize=(3.3 * cols, 2.7 * rows))
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, name in zip(axes, names):
        for label, per_run in histograms.items():
            if name not in per_run:
                continue
            edges, counts = per_run[name]["edges"], per_run[name]["counts"]
            total, width = max(1, sum(counts)), edges[1] - edges[0]
            mean = results[label][MEAN_KEYS[quantity].format(name)]
            ax.stairs(
                [c / (total * width) for c in counts], edges, fill=True, alpha=0.5, label=f"{label} (mu={mean:.3g})"
            )
        ax.set(title=name, xlabel="local Lipschitz estimate", ylabel="density (per unit of the estimate)")
        ax.legend(fontsize=7)
    for ax in axes[len(names) :]:
        ax.set_visible(False)
    note = "last bin: values above the 99th percentile; lower = smoother"
    fig.suptitle(f"{title or QUANTITIES[quantity]}\n({note})", fontsize=9)
    return save_figure(fig, path)
