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
