"""Figures of evaluation results, written as PNG files (matplotlib, Agg canvas, no display needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from probcl.core.io import atomic_write
from probcl.errors import ConfigError

DPI = 110


def save_figure(fig: Figure, path: str | Path, dpi: int = DPI) -> Path:
    """Lay out ``fig`` and write it as a PNG, atomically; returns the path."""
    path = Path(path)
    FigureCanvasAgg(fig)
    fig.tight_layout()
    atomic_write(path, lambda fh: fig.savefig(fh, format="png", dpi=dpi))
    return path


def whole_number_ticks(ax: Axes) -> None:
    """Ticks of the x axis at whole numbers only (epochs, severities): no "1.5 epochs"."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def reliability_diagram(bins: dict, path: str | Path, title: str = "") -> Path:
    """Bars of per-bin accuracy over the M confidence bins, the gap to the diagonal, and bin counts."""
    n = len(bins["count"])
    width = 1.0 / n
    left = [i * width for i in range(n)]
    fig = Figure(figsize=(4.2, 4.6))
    ax, ax_count = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax.bar(left, bins["accuracy"], width=width, align="edge", color="#4c72b0", edgecolor="white", label="accuracy")
    gaps = [c - a if k else 0.0 for a, c, k in zip(bins["accuracy"], bins["confidence"], bins["count"])]
    ax.bar(
        left,
        gaps,
        bottom=bins["accuracy"],
        width=width,
        align="edge",
        color="#dd8452",
        alpha=0.5,
        edgecolor="#dd8452",
        label="gap to confidence",
    )
    ax.plot([0, 1], [0, 1], "k--", lw=1, label="perfect calibration")
    ax.set(xlim=(0, 1), ylim=(0, 1), ylabel="accuracy (fraction)", title=title)
    ax.legend(loc="upper left", fontsize=8)
    ax_count.bar(left, bins["count"], width=width, align="edge", color="#8c8c8c", label="images per bin")
    ax_count.set(xlabel="confidence (max softmax, fraction)", ylabel="images")
    ax_count.legend(loc="upper left", fontsize=7)
    return save_figure(fig, path)


def score_histograms(
    histograms: dict[str, dict], path: str | Path, title: str = "", scores: Sequence[str] | None = None
) -> Path:
    """One panel per score: the normalized score distribution of the ID set and of each OOD set."""
    names = [s for s in (scores or list(histograms)) if s in histograms]
    if not names:
        raise ConfigError("no histogram to plot")
    fig = Figure(figsize=(3.6 * len(names), 3.0))
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    for ax, name in zip(axes, names):
        edges, counts = histograms[name]["edges"], histograms[name]["counts"]
        for set_name, c in counts.items():
            total = max(1, sum(c))
            ax.stairs(
                [v / total for v in c],
                edges,
                label=set_name,
                fill=set_name == "id",
                alpha=0.35 if set_name == "id" else 1.0,
            )
        ax.set(title=name, xlabel="outlier score (higher = more OOD)", ylabel="fraction of the set's images")
    axes[0].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)


def curves(
    series: Mapping[str, Sequence[tuple[float, float]]],
    path: str | Path,
    ylabel: str,
    title: str = "",
    xlabel: str = "epoch",
    whole_x: bool = True,
) -> Path:
    """Line plot of named (x, y) series, e.g. per-epoch kNN accuracy of several methods; ``whole_x``: x ticks at
    whole numbers (epochs, severities). Each series has its own colour, line style and marker
    (:func:`line_styles`), and the legend stands beside the plot, never on it, in as many columns as it needs."""
    return save_figure(curves_figure(series, ylabel, title, xlabel, whole_x), path)


LEGEND_ROWS = 24  # legend entries per column beside a curves plot (7 pt text on its 3.6 in height)
LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D")


def line_styles(count: int) -> list[tuple[tuple[float, ...], str, str]]:
    """``count`` distinct (colour, line style, marker): tab10's ten colours, then again with the next line style
    and marker (40 distinct, then repeating)."""
    tab10 = colormaps["tab10"]
    return [
        (tab10(i % 10), LINE_STYLES[i // 10 % len(LINE_STYLES)], MARKERS[i // 10 % len(MARKERS)]) for i in range(count)
    ]


def curves_figure(
    series: Mapping[str, Sequence[tuple[float, float]]], ylabel: str, title: str, xlabel: str, whole_x: bool
) -> Figure:
    """The figure :func:`curves` writes."""
    drawn = {label: points for label, points in series.items() if points}
    columns = max(1, -(-len(drawn) // LEGEND_ROWS))
    fig = Figure(figsize=(5.5 + 2.0 * columns, 3.6))
    ax = fig.subplots()
    for (label, points), (colour, style, marker) in zip(drawn.items(), line_styles(len(drawn))):
        xs, ys = zip(*points)
        ax.plot(xs, ys, color=colour, linestyle=style, marker=marker, ms=3, label=label)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if whole_x:
        whole_number_ticks(ax)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=columns, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return fig


Series = Mapping[str, Sequence[tuple[float, ...]]]  # label -> (x, y) or (x, y, error bar half-width) points


def panels(
    grid: Sequence[tuple[str, Series, str]],
    path: str | Path,
    title: str = "",
    xlabel: str = "step",
    columns: int = 3,
    log2_x: bool = False,
    whole_x: bool = False,
) -> Path:
    """Small multiples: one panel per ``(title, {label: points}, ylabel)``, each with its own y scale;
    ``title`` above them when there are several. Points are ``(x, y)``, or ``(x, y, e)`` for error bars
    y +- e; ``log2_x`` puts x on a log2 axis ticked at the points' x (e.g. batch sizes); ``whole_x`` ticks x at
    whole numbers (epochs)."""
    if not grid:
        raise ConfigError("no panel to plot")
    cols = min(columns, len(grid))
    rows = -(-len(grid) // cols)
    fig = Figure(figsize=(4.0 * cols, 2.8 * rows))
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, (name, series, ylabel) in zip(axes, grid):
        for label, points in series.items():
            if not points:
                continue
            xs, ys, *errors = zip(*points)
            marker = "o" if len(points) <= 30 else None
            if errors:
                ax.errorbar(xs, ys, yerr=errors[0], marker=marker, ms=3, lw=1.2, capsize=3, label=label)
            else:
                ax.plot(xs, ys, marker=marker, ms=3, lw=1.2, label=label)
        if log2_x:
            ticks = sorted({p[0] for points in series.values() for p in points})
            ax.set_xscale("log", base=2)
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        elif whole_x:
            whole_number_ticks(ax)
        ax.set(title=name, xlabel=xlabel, ylabel=ylabel)
        ax.grid(alpha=0.3)
        if any(points for points in series.values()):
            ax.legend(fontsize=7)
    for ax in axes[len(grid) :]:
        ax.set_visible(False)
    if title and len(grid) > 1:
        fig.suptitle(title)
    return save_figure(fig, path)


Interval = tuple[str, float | None, tuple[float, float] | None]  # (row label, mean or None, 95 % interval or None)


def interval_panels(
    grid: Sequence[tuple[str, str, Sequence[Interval], Sequence[float]]],
    path: str | Path,
    title: str = "",
    columns: int = 2,
) -> Path:
    """Small multiples of means with intervals: one panel per ``(title, x label, rows, guides)``, a row per
    ``(label, mean, (low, high))`` drawn as a dot with a horizontal error bar (a dot alone without an interval,
    nothing without a mean), each panel on its own x scale with dashed vertical ``guides`` (e.g. 0)."""
    import textwrap

    if not grid:
        raise ConfigError("no panel to plot")
    cols = min(columns, len(grid))
    rows = -(-len(grid) // cols)
    fig = Figure(figsize=(6.0 * cols, 2.3 * rows))
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, (name, xlabel, intervals, guides) in zip(axes, grid):
        for y, (_, mean, interval) in enumerate(intervals):
            if mean is None:
                continue
            low, high = interval or (mean, mean)
            ax.errorbar([mean], [y], xerr=[[mean - low], [high - mean]], fmt="o", ms=5, capsize=4, color=f"C{y}")
        for x in guides:
            ax.axvline(x, color="#555555", ls="--", lw=0.8)
        ax.set_yticks(range(len(intervals)), [label for label, _, _ in intervals], fontsize=8)
        ax.set_ylim(-0.6, len(intervals) - 0.4)
        ax.invert_yaxis()
        ax.set_title("\n".join(textwrap.wrap(name, 70)), fontsize=8)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    for ax in axes[len(grid) :]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)


def embedding_scatter(
    points: Sequence[Sequence[float]],
    labels: Sequence[int],
    path: str | Path,
    title: str = "",
    class_names: Sequence[str] | None = None,
) -> Path:
    """A 2-D map (e.g. t-SNE) of embedded images, one colour per class (grey: unlabeled); a legend up to 20 classes."""
    import numpy as np

    xy, y = np.asarray(points, dtype=float), np.asarray(labels)
    classes = sorted(int(c) for c in set(y.tolist()) if c >= 0)
    cmap = colormaps["tab10" if len(classes) <= 10 else "tab20" if len(classes) <= 20 else "turbo"]
    size = float(np.clip(8000 / max(1, len(xy)), 4, 16))
    fig = Figure(figsize=(6.4, 5.6))
    ax = fig.subplots()
    if (y < 0).any():
        ax.scatter(xy[y < 0, 0], xy[y < 0, 1], s=size, c="#bbbbbb", label="unlabeled", linewidths=0)
    for i, c in enumerate(classes):
        colour = cmap(i if len(classes) <= 20 else i / max(1, len(classes) - 1))
        name = class_names[c] if class_names is not None and c < len(class_names) else str(c)
        ax.scatter(xy[y == c, 0], xy[y == c, 1], s=size, color=colour, label=name, linewidths=0)
    ax.set(title=title, xticks=[], yticks=[], xlabel="t-SNE 1 (no unit)", ylabel="t-SNE 2 (no unit)")
    if len(classes) <= 20:
        ax.legend(
            fontsize=7, markerscale=max(1.0, 6 / size**0.5), loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False
        )
    return save_figure(fig, path)


def histogram_over_time(
    steps: Sequence[float],
    bins: Sequence[str],
    shares: Sequence[Sequence[float]],
    path: str | Path,
    title: str = "",
    xlabel: str = "optimiser step",
    ylabel: str = "",
) -> Path:
    """A histogram per logged step as one heatmap: x = step, y = the ``bins`` (labels, lowest first), colour =
    the share of the batch in that bin (``shares[step][bin]``)."""
    if not steps or not bins:
        raise ConfigError("no histogram to plot")
    import numpy as np

    fig = Figure(figsize=(7.5, 3.6))
    ax = fig.subplots()
    grid = np.asarray(shares, dtype=float).T  # (bins, steps)
    edges = np.r_[steps[0] - 0.5, [(a + b) / 2 for a, b in zip(steps[:-1], steps[1:])], steps[-1] + 0.5]
    mesh = ax.pcolormesh(edges, np.arange(len(bins) + 1), grid, cmap="viridis", vmin=0.0, vmax=1.0, shading="flat")
    step = max(1, len(bins) // 9)
    ax.set_yticks(np.arange(len(bins))[::step] + 0.5, list(bins)[::step], fontsize=7)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    fig.colorbar(mesh, ax=ax, label="share of the batch")
    return save_figure(fig, path)
