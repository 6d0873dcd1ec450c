"""ECE/MCE (VEM eq. 16-19) against a hand-computed case and torchmetrics; Brier; temperature scaling; the ECE's
bootstrap spread and the floor of a calibrated probe against their closed forms in a one-bin case."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torchmetrics.functional.classification import multiclass_calibration_error

from probcl.core.calibration_bins import calibration_errors
from probcl.eval.calibration import (
    brier_score,
    calibration_metrics,
    ece_bootstrap,
    ece_floor,
    ece_floor_from_bins,
    fit_temperature,
    reliability_bins,
)


def test_hand_computed_example():
    # M = 4 bins [0, .25), [.25, .5), [.5, .75), [.75, 1]; confidence 0 -> first bin, 1 -> last bin.
    confidence = torch.tensor([0.0, 0.3, 0.4, 0.6, 0.8, 0.9, 1.0, 1.0])
    correct = torch.tensor([0, 1, 0, 1, 1, 0, 1, 1])
    bins = reliability_bins(confidence, correct, n_bins=4)
    assert bins["count"] == [1, 2, 1, 4]
    assert bins["accuracy"] == pytest.approx([0.0, 0.5, 1.0, 0.75])
    assert bins["confidence"] == pytest.approx([0.0, 0.35, 0.6, 0.925])
    ece, mce = calibration_errors(bins)
    # |B|/n |acc - conf|: 1/8*0 + 2/8*0.15 + 1/8*0.4 + 4/8*0.175
    assert ece == pytest.approx(2 / 8 * 0.15 + 1 / 8 * 0.4 + 4 / 8 * 0.175)
    assert mce == pytest.approx(0.4)


def test_empty_bins_do_not_count_for_mce():
    bins = reliability_bins(torch.tensor([0.96, 0.98]), torch.tensor([1, 1]), n_bins=20)
    assert sum(bins["count"]) == 2 and bins["count"][19] == 2
    assert calibration_errors(bins)[1] == pytest.approx(0.03)


def test_matches_torchmetrics():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2000, 10, generator=gen) * 3
    labels = torch.randint(0, 10, (2000,), generator=gen)
    labels[:1200] = logits[:1200].argmax(1)  # 60%+ accuracy, overconfident in places
    probs = logits.double().softmax(1)
    assert probs.max() < 1  # torchmetrics (float32 inside) puts confidence 1.0 in an extra bin; stay off that edge
    ours = calibration_metrics(logits, labels, n_bins=20)
    ref_ece = multiclass_calibration_error(probs, labels, num_classes=10, n_bins=20, norm="l1")
    ref_mce = multiclass_calibration_error(probs, labels, num_classes=10, n_bins=20, norm="max")
    assert ours["ece"] == pytest.approx(ref_ece.item(), abs=1e-6)
    assert ours["mce"] == pytest.approx(ref_mce.item(), abs=1e-6)


def test_brier_and_nll_direct_formulas():
    logits = torch.tensor([[1.0, 2.0, 0.5], [0.1, -1.0, 3.0], [0.0, 0.0, 0.0]])
    labels = torch.tensor([1, 0, 2])
    p = np.exp(logits.numpy()) / np.exp(logits.numpy()).sum(1, keepdims=True)
    onehot = np.eye(3)[labels.numpy()]
    expected_brier = np.mean(np.sum((p - onehot) ** 2, axis=1))
    assert brier_score(torch.tensor(p), labels) == pytest.approx(expected_brier)
    metrics = calibration_metrics(logits, labels, n_bins=20)
    assert metrics["brier"] == pytest.approx(expected_brier)
    assert metrics["nll"] == pytest.approx(-np.mean(np.log(p[np.arange(3), labels.numpy()])))
    assert metrics["top1"] == pytest.approx(100 / 3)


def test_temperature_scaling_recovers_the_true_temperature():
    # Labels drawn from softmax(z / 2): the NLL-optimal temperature for logits z is about 2.
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(5000, 5, generator=gen) * 4
    labels = torch.multinomial((z / 2).softmax(1), 1, generator=gen).squeeze(1)
    t = fit_temperature(z, labels)
    grid = np.exp(np.linspace(math.log(0.5), math.log(8), 801))
    nll = [torch.nn.functional.cross_entropy(z.double() / g, labels).item() for g in grid]
    assert t == pytest.approx(grid[int(np.argmin(nll))], rel=5e-3)
    assert t == pytest.approx(2.0, rel=0.1)
    before = calibration_metrics(z, labels)["ece"]
    after = calibration_metrics(z / t, labels)["ece"]
    assert after < before


@pytest.mark.parametrize("n_bins", [10, 15, 20])
def test_a_confidence_exactly_on_an_edge_opens_the_upper_bin(n_bins):
    assert 3 / 20 == 0.15  # k / M is the literal: the edges below are the values users see
    # Each confidence is the decimal literal k / M (0.15, 0.30, ... for M = 20): it belongs to bin k,
    # [k/M, (k+1)/M), whatever the floating-point noise of the edges; 1.0 belongs to the last bin.
    edges = [k / n_bins for k in range(n_bins)] + [1.0]
    counts = reliability_bins(torch.tensor(edges, dtype=torch.float64), torch.ones(n_bins + 1), n_bins)["count"]
    assert counts == [1] * (n_bins - 1) + [2]


def _one_bin(n: int, p: float) -> torch.Tensor:
    """Logits whose softmax is (p, 1 - p) for every one of n images: one confidence, one bin, class 0 predicted."""
    return torch.tensor([math.log(p), math.log(1 - p)], dtype=torch.float64).repeat(n, 1)


def test_the_ece_floor_of_a_calibrated_probe_matches_the_normal_approximation():
    """Every image at confidence p, labels drawn from the probe's own probabilities: the ECE is |mean(correct) - p|,
    whose expectation for n images is sqrt(2 / pi) * sqrt(p (1 - p) / n) (the mean absolute value of a normal;
    8,000 images, p 0.8: 0.00357), a floor that a perfectly calibrated probe does not go below."""
    n, p = 8000, 0.8
    floor = ece_floor(_one_bin(n, p), 20, resamples=2000, seed=0)
    expected = math.sqrt(2 / math.pi) * math.sqrt(p * (1 - p) / n)
    assert floor["mean"] == pytest.approx(expected, rel=0.06) and floor["resamples"] == 2000
    assert floor["std"] == pytest.approx(math.sqrt(1 - 2 / math.pi) * math.sqrt(p * (1 - p) / n), rel=0.1)
    # the same floor from the reliability bins alone (what a published eval.json keeps)
    bins = calibration_metrics(_one_bin(n, p), torch.zeros(n, dtype=torch.long))["bins"]
    from_bins = ece_floor_from_bins(bins, resamples=2000, seed=1)
    assert from_bins["mean"] == pytest.approx(expected, rel=0.06) and from_bins["std"] == pytest.approx(
        floor["std"], rel=0.1
    )


def test_the_ece_bootstrap_spread_matches_the_binomial_one():
    """Confidence 0.8 everywhere and 7,200 of 8,000 correct: every resample's ECE is its accuracy minus 0.8, so its
    spread is the binomial sqrt(0.9 * 0.1 / 8000) = 0.00335 and its 95 % range about 0.1 +- 1.96 of that."""
    n = 8000
    labels = torch.cat([torch.zeros(7200, dtype=torch.long), torch.ones(800, dtype=torch.long)])
    boot = ece_bootstrap(_one_bin(n, 0.8), labels, 20, resamples=1000, seed=0)
    sd = math.sqrt(0.9 * 0.1 / n)
    assert boot["std"] == pytest.approx(sd, rel=0.08)
    assert boot["low"] == pytest.approx(0.1 - 1.96 * sd, abs=5e-4) and boot["high"] == pytest.approx(
        0.1 + 1.96 * sd, abs=5e-4
    )
