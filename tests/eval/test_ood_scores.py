"""ID-fitted outlier scores against scikit-learn / numpy references and hand-computed tail probabilities."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.covariance import EmpiricalCovariance

from probcl.eval.ood_scores import TailCombiner, fit_gaussian, input_statistics


def test_class_free_mahalanobis_matches_sklearn():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(500, 6, generator=g, dtype=torch.float64) @ torch.randn(6, 6, generator=g, dtype=torch.float64)
    q = torch.randn(20, 6, generator=g, dtype=torch.float64) * 2
    ours = fit_gaussian(x).distances(q).double()
    ref = EmpiricalCovariance(assume_centered=False).fit(x.numpy())
    # sklearn divides the covariance by n, we by n - 1 (unbiased): the distances differ by that factor
    expected = ref.mahalanobis(q.numpy()) * (len(x) - 1) / len(x)
    np.testing.assert_allclose(ours.numpy(), expected, rtol=1e-3)  # up to the tiny ridge on the diagonal


def test_class_conditional_mahalanobis_is_the_nearest_class_under_the_pooled_covariance():
    g = torch.Generator().manual_seed(1)
    means = torch.tensor([[0.0, 0.0, 0.0], [5.0, 0.0, 0.0], [0.0, 5.0, 0.0]], dtype=torch.float64)
    labels = torch.arange(3).repeat_interleave(100)
    x = means[labels] + torch.randn(300, 3, generator=g, dtype=torch.float64) * torch.tensor(
        [1.0, 0.5, 2.0], dtype=torch.float64
    )
    q = torch.randn(10, 3, generator=g, dtype=torch.float64) * 4
    xn, ln, qn = x.numpy(), labels.numpy(), q.numpy()
    mu = np.stack([xn[ln == c].mean(0) for c in range(3)])
    centred = np.concatenate([xn[ln == c] - mu[c] for c in range(3)])
    prec = np.linalg.inv(centred.T @ centred / (len(xn) - 3))
    expected = np.min([np.einsum("nd,de,ne->n", qn - m, prec, qn - m) for m in mu], axis=0)
    np.testing.assert_allclose(fit_gaussian(x, labels).distances(q).numpy(), expected, rtol=1e-4)


def test_tail_probabilities_hand_computed():
    combiner = TailCombiner.fit(
        {"a": torch.tensor([1.0, 2.0, 3.0, 4.0]), "b": torch.tensor([10.0, 20.0, 30.0, 40.0])},
        two_sided=frozenset({"b"}),
    )
    # one-sided: (1 + #{ID >= s}) / 5; past the largest score exp(-excess / beta) / 5, beta = the mean excess of
    # the 3 largest (tail_size(4) = 3) over the 4th: a: (4 + 3 + 2) / 3 - 1 = 2; b: (40 + 30 + 20) / 3 - 10 = 20
    torch.testing.assert_close(
        combiner.tail_probability("a", torch.tensor([0.0, 2.0, 2.5, 9.0])),
        torch.tensor([5 / 5, 4 / 5, 3 / 5, math.exp(-5 / 2) / 5], dtype=torch.float64),
    )
    # two-sided: 2 min(upper, lower), lower = (1 + #{ID <= s}) / 5, extrapolated below 10 with beta 20 too
    torch.testing.assert_close(
        combiner.tail_probability("b", torch.tensor([0.0, 25.0, 99.0])),
        torch.tensor([2 * math.exp(-10 / 20) / 5, 1.0, 2 * math.exp(-59 / 20) / 5], dtype=torch.float64),
    )
    combined = combiner.combine({"a": torch.tensor([9.0, 2.0]), "b": torch.tensor([25.0, 0.0])})
    torch.testing.assert_close(
        combined.double(),
        torch.tensor([5 / 2 + math.log(5), -math.log(2 * math.exp(-0.5) / 5)], dtype=torch.float64),
        rtol=1e-6,
        atol=1e-6,
    )


def test_combined_score_flags_an_extreme_value_of_any_single_score():
    g = torch.Generator().manual_seed(2)
    calibration = {name: torch.randn(1000, generator=g) for name in ("x", "y", "z")}
    combiner = TailCombiner.fit(calibration)
    fresh = {name: torch.randn(1000, generator=g) for name in ("x", "y", "z")}
    threshold = torch.quantile(combiner.combine(fresh), 0.95)
    outlier = {"x": torch.zeros(1), "y": torch.tensor([6.0]), "z": torch.zeros(1)}  # only y is unusual
    assert combiner.combine(outlier)[0] > threshold


def test_input_statistics_hand_computed():
    blank = torch.zeros(1, 1, 4, 4, dtype=torch.uint8)
    checker = (torch.arange(16).view(4, 4) % 2 * 255).to(torch.uint8)[None, None]
    stats = input_statistics(torch.cat([blank, checker]))
    # mean, std, dark share, bright share, edge energy, histogram entropy, channel spread
    assert stats[0].tolist() == pytest.approx([0, 0, 1, 0, 0, 0, 0])
    assert stats[1, 0] == pytest.approx(0.5) and stats[1, 2] == pytest.approx(0.5) and stats[1, 3] == pytest.approx(0.5)
    assert stats[1, 4] == pytest.approx(0.0 + 1.0)  # rows constant, columns alternate 0/1
    assert stats[1, 5] == pytest.approx(math.log(2))
