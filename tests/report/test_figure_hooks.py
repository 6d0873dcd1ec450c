"""Only report/ draws: figure hooks turn suite results (figure data) into PNGs."""

import pytest
import torch

from probcl.eval import SUITES
from probcl.eval.calibration import calibration_metrics, reliability_bins
from probcl.report.figures import FIGURES, attack_curve, pool_bins, render_run_figures, severity_curve


def test_every_figure_hook_belongs_to_a_suite():
    assert set(FIGURES.names()) == {"calibration", "adversarial", "corruptions", "ood", "lipschitz"}
    assert set(FIGURES.names()) <= set(SUITES.names())


def test_pooled_bins_equal_the_bins_of_the_pooled_predictions():
    gen = torch.Generator().manual_seed(0)
    conf = [torch.rand(50, generator=gen), torch.rand(30, generator=gen)]
    correct = [torch.rand(50, generator=gen) < 0.7, torch.rand(30, generator=gen) < 0.4]
    pooled = pool_bins([reliability_bins(c, k) for c, k in zip(conf, correct)])
    reference = reliability_bins(torch.cat(conf), torch.cat(correct))
    assert pooled["count"] == reference["count"]
    assert pooled["accuracy"] == pytest.approx(reference["accuracy"])
    assert pooled["confidence"] == pytest.approx(reference["confidence"])


def test_curves_average_over_seeds():
    runs = [
        {"clean_top1": 80.0, "fgsm": {"eps8": 40.0, "eps4": 60.0}, "per_severity": {"a": [70, 60, 50, 40, 30]}},
        {"clean_top1": 90.0, "fgsm": {"eps8": 50.0, "eps4": 70.0}, "per_severity": {"a": [80, 70, 60, 50, 40]}},
    ]
    assert attack_curve(runs, "fgsm") == [(0.0, 85.0), (4.0, 65.0), (8.0, 45.0)]
    assert severity_curve(runs) == [(0.0, 85.0), (1.0, 75.0), (2.0, 65.0), (3.0, 55.0), (4.0, 45.0), (5.0, 35.0)]


def test_run_figures_are_drawn_from_results_alone(tmp_path):
    logits = torch.randn(200, 3, generator=torch.Generator().manual_seed(1))
    calibration = calibration_metrics(logits, logits.argmax(1) % 3)
    histogram = {"edges": [0.0, 0.5, 1.0], "counts": [3, 1]}
    lipschitz = {
        "brightness+": 0.4,
        "brightness+ kl_bound": 0.1,
        "histograms": {"sampled": {"brightness+": histogram}, "kl_bound": {"brightness+": histogram}},
    }
    ood = {"histograms": {"msp": {"edges": [0.0, 0.5, 1.0], "counts": {"id": [4, 1], "noise": [1, 4]}}}}
    drawn = render_run_figures(
        {"calibration": calibration, "lipschitz": lipschitz, "ood": ood, "knn": {"top1": 1.0}},
        "tau-simclr@projection",
        tmp_path,
    )
    names = sorted(path.name for path, _ in drawn)
    assert names == ["lipschitz.png", "ood-tau-simclr-projection.png", "reliability-tau-simclr-projection.png"]
    assert all(path.stat().st_size > 1000 for path, _ in drawn)
