"""Figures people can read: whole-number epoch ticks, and a run report that opens with a summary."""

from __future__ import annotations

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from probcl.report.plots import whole_number_ticks
from probcl.report.run_report import summary_rows


def _ticks(whole: bool) -> list[float]:
    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.plot([1, 2, 3], [50.0, 60.0, 65.0])  # three epochs
    if whole:
        whole_number_ticks(ax)
    fig.canvas.draw()
    lo, hi = ax.get_xlim()
    return [t for t in ax.get_xticks() if lo <= t <= hi]


def test_epoch_axes_are_ticked_at_whole_numbers_only():
    assert any(not float(t).is_integer() for t in _ticks(whole=False))  # matplotlib's default: 1.25, 1.5, ...
    ticks = _ticks(whole=True)
    assert ticks and all(float(t).is_integer() for t in ticks) and {1.0, 2.0, 3.0} <= set(ticks)


def test_report_summary_gives_method_data_budget_and_headline_metrics():
    config = {
        "method": "simclr",
        "data": {"dataset": "digits", "train_subset": 512},
        "model": {"backbone": "cnn", "width": 8},
        "train": {"epochs": 2, "batch_size": 64},
    }
    rows = [{"step": 7, "train/loss": 3.1}, {"step": 15, "epoch": 1, "monitor/knn_top1": 71.25}]
    evaluations = {
        "linear": {"top1": 87.123},
        "knn": {"top1": 80.5},
        "ood": {"sets": {"noise:gaussian": {"combined": {"auroc": 0.99871}}}},
    }
    assert summary_rows(config, evaluations, rows) == [
        ["method", "`simclr`"],
        ["data", "`digits`, a 512-image subset"],
        ["backbone", "`cnn` (width 8)"],
        ["budget", "2 epochs at batch 64: 15 optimiser steps logged"],
        ["online kNN monitor, last epoch", "71.25 %"],
        ["linear probe top-1", "87.12 %"],
        ["weighted kNN top-1", "80.50 %"],
        ["OOD AUROC of the combined score, noise:gaussian", "0.999"],
    ]
    assert summary_rows(config, {}, [])[-1] == ["evaluation", "none yet: `probcl evaluate RUN --suite linear,knn`"]


def test_thirty_training_curves_have_distinct_styles_and_a_legend_beside_the_plot(tmp_path):
    """The study's "training curves" figure had 30 entries: the legend covered ~80 % of the plot and colours
    repeated every ten lines (issue 43 item 14)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from probcl.report.plots import curves, curves_figure, line_styles

    assert len(set(line_styles(30))) == 30
    series = {f"method-{i}": [(1, 60 + i * 0.5), (2, 61 + i * 0.5), (3, 62 + i * 0.3)] for i in range(30)}
    fig = curves_figure(series, "kNN top-1 %", "training curves", "epoch", whole_x=True)
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.tight_layout()
    (ax,) = fig.axes
    legend, plot = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    assert legend.x0 >= plot.x1  # beside the axes, not on them
    assert 0 <= legend.y0 and legend.y1 <= fig.bbox.y1  # and inside the figure: every entry readable
    styles = {(line.get_color(), line.get_linestyle(), line.get_marker()) for line in ax.get_lines()}
    assert len(styles) == 30
    assert curves(series, tmp_path / "c.png", "kNN top-1 %").is_file()
