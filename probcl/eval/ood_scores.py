"""Outlier scores fitted on in-distribution data only, and their conservative combination.

Every score is an outlier score (higher = more out-of-distribution) and is fitted on
in-distribution (ID) training data alone; none needs OOD examples.

- Mahalanobis distance (Lee et al. 2018): class-conditional (class means, one shared covariance,
  the smallest distance over classes) and class-free (one Gaussian), on backbone features.
- Feature norm, two-sided: far OOD inputs (noise) can inflate it, blank inputs shrink it.
- Input statistics: a few per-image pixel statistics (mean, spread, saturation, edge energy,
  histogram entropy) scored by a class-free Mahalanobis distance, which catches degenerate
  images (blank, noise, inverted, wrong contrast) whatever the encoder does with them.
- :class:`TailCombiner`: each score becomes a tail probability under its ID calibration
  distribution, p_s(x) = (1 + #{ID calibration scores >= s(x)}) / (1 + n) (two-sided where a
  score can fail both ways); :meth:`TailCombiner.combine` is -log(min_s p_s), so an image is flagged
  as soon as any one score is extreme for ID data (a Bonferroni-style, conservative union);
  ``probcl score`` and the ``ood`` suite weight it (:mod:`probcl.eval.id_reference`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from probcl.errors import ConfigError

RIDGE = 1e-6  # added to the covariance diagonal (relative to its mean variance): features can be rank-deficient


@dataclass
class Gaussian:
    """Means (K, d) and the inverse of one shared covariance (d, d) of ID features."""

    means: torch.Tensor
    precision: torch.Tensor

    def distances(self, x: torch.Tensor) -> torch.Tensor:
        """Squared Mahalanobis distance (N,) to the nearest mean."""
        x = x.double()
        best = None
        for mean in self.means:
            diff = x - mean
            d = ((diff @ self.precision) * diff).sum(1)
            best = d if best is None else torch.minimum(best, d)
        assert best is not None
        return best.float()

    def state(self) -> dict:
        return {"means": self.means, "precision": self.precision}

    @classmethod
    def from_state(cls, state: dict) -> Gaussian:
        return cls(state["means"], state["precision"])


def fit_gaussian(features: torch.Tensor, labels: torch.Tensor | None = None) -> Gaussian:
    """Class means and the pooled within-class covariance (one Gaussian when ``labels`` is None)."""
    x = features.double()
    if len(x) < 2:
        raise ConfigError("a Mahalanobis score needs at least 2 in-distribution images")
    if labels is None:
        groups = [x]
    else:
        groups = [x[labels == c] for c in labels.unique().tolist() if c >= 0]
        groups = [g for g in groups if len(g)]
    means = torch.stack([g.mean(0) for g in groups])
    centred = torch.cat([g - g.mean(0) for g in groups])
    cov = centred.T @ centred / max(1, len(centred) - len(groups))
    cov = cov + RIDGE * cov.diagonal().mean().clamp_min(1e-12) * torch.eye(len(cov), dtype=cov.dtype)
    return Gaussian(means, torch.linalg.inv(cov))


def input_statistics(images: torch.Tensor) -> torch.Tensor:
    """Per-image statistics (N, 7) of uint8 or [0, 1] images (N, C, H, W): mean, std, dark and bright
    saturation shares, mean absolute horizontal+vertical difference, histogram entropy, channel spread."""
    x = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
    flat = x.flatten(1)
    dark = (flat <= 1 / 255).float().mean(1)
    bright = (flat >= 254 / 255).float().mean(1)
    edges = (x[..., 1:, :] - x[..., :-1, :]).abs().flatten(1).mean(1) + (x[..., 1:] - x[..., :-1]).abs().flatten(
        1
    ).mean(1)
    bins = (flat * 15.999).long().clamp(0, 15)
    hist = torch.zeros(len(x), 16).scatter_add_(1, bins, torch.ones_like(flat)) / flat.shape[1]
    entropy = -(hist * hist.clamp_min(1e-12).log()).sum(1)
    channel_spread = x.std(1).flatten(1).mean(1) if x.shape[1] > 1 else torch.zeros(len(x))
    return torch.stack([flat.mean(1), flat.std(1), dark, bright, edges, entropy, channel_spread], dim=1)


def tail_size(n: int) -> int:
    """Calibration scores of each tail that fit its exponential extrapolation: 5 % of n, at least 5."""
    return min(n - 1, max(5, math.ceil(0.05 * n)))


def _exponential_tail(excess: torch.Tensor, ordered: torch.Tensor, n: int) -> torch.Tensor:
    """p = exp(-excess / beta) / (1 + n) past the last calibration score; ``ordered`` runs from the extreme
    inwards, and beta is the mean excess of the ``tail_size(n)`` most extreme scores over the next one (the
    maximum-likelihood scale of an exponential tail). One calibration score: no extrapolation."""
    m = tail_size(n)
    if m < 1:
        return torch.full_like(excess, 1.0 / (1 + n))
    beta = float((ordered[:m] - ordered[m]).abs().mean())
    beta = max(beta, 1e-12 * (1.0 + float(ordered[0].abs())))  # constant calibration scores: a step
    # floored at the smallest normal float64, so that -log p stays finite (<= 708) however far out an image is
    return (torch.exp(-excess / beta) / (1 + n)).clamp_min(torch.finfo(torch.float64).tiny)


@dataclass
class TailCombiner:
    """Per-score ID calibration samples -> combined outlier score -log(min_s p_s(x))."""

    calibration: dict[str, torch.Tensor]  # score name -> sorted ID scores
    two_sided: frozenset[str] = frozenset()

    @classmethod
    def fit(cls, id_scores: dict[str, torch.Tensor], two_sided: frozenset[str] = frozenset()) -> TailCombiner:
        if not id_scores:
            raise ConfigError("the combined OOD score needs at least one score")
        return cls({k: v.double().sort().values for k, v in id_scores.items()}, frozenset(two_sided))

    def tail_probability(self, name: str, scores: torch.Tensor) -> torch.Tensor:
        """(1 + #{ID >= s}) / (1 + n), doubled and capped at 1 for the lower tail of two-sided scores.

        Beyond the most extreme calibration score the tail is extrapolated as an exponential (the
        peaks-over-threshold fit of the ``tail_size(n)`` most extreme scores), so that p keeps falling below
        1 / (1 + n): an image far outside everything seen in calibration gets a tiny p, whatever n.
        """
        ref = self.calibration[name]
        n = len(ref)
        s = scores.double()
        upper = (1 + n - torch.searchsorted(ref, s, right=False)).double() / (1 + n)
        upper = torch.where(s > ref[-1], _exponential_tail(s - ref[-1], ref.flip(0), n), upper)
        if name not in self.two_sided:
            return upper
        lower = (1 + torch.searchsorted(ref, s, right=True)).double() / (1 + n)
        lower = torch.where(s < ref[0], _exponential_tail(ref[0] - s, ref, n), lower)
        return (2 * torch.minimum(upper, lower)).clamp(max=1.0)

    def tail_probabilities(
        self, scores: dict[str, torch.Tensor], names: Sequence[str] | None = None
    ) -> dict[str, torch.Tensor]:
        """Tail probabilities of ``names`` (default: every calibrated score)."""
        return {name: self.tail_probability(name, scores[name]) for name in (names or self.calibration)}

    @staticmethod
    def weighted_surprise(tails: dict[str, torch.Tensor], weights: dict[str, float]) -> dict[str, torch.Tensor]:
        """-log (p_s / w_s) of each weighted score: the terms whose maximum is the (weighted Bonferroni)
        combined score; w_s = 1 for all gives the plain -log min_s p_s."""
        return {name: -(tails[name] / w).log().float() for name, w in weights.items()}

    def combine(
        self,
        scores: dict[str, torch.Tensor],
        names: Sequence[str] | None = None,
        weights: dict[str, float] | None = None,
    ) -> torch.Tensor:
        """-log min_s p_s / w_s over the scores ``names`` (default: all; weights default 1; higher = more OOD)."""
        tails = self.tail_probabilities(scores, names)
        terms = self.weighted_surprise(tails, weights or dict.fromkeys(tails, 1.0))
        return torch.stack(list(terms.values())).max(0).values

    def culprit(self, scores: dict[str, torch.Tensor], names: Sequence[str] | None = None) -> list[str]:
        """The score with the smallest tail probability, per image: why an image looks out-of-distribution."""
        tails = self.tail_probabilities(scores, names)
        order = list(tails)
        return [order[i] for i in torch.stack(list(tails.values())).argmin(0).tolist()]

    def state(self) -> dict:
        """Plain tensors and lists (for ``torch.save(weights_only=True)`` caches)."""
        return {"calibration": dict(self.calibration), "two_sided": sorted(self.two_sided)}

    @classmethod
    def from_state(cls, state: dict) -> TailCombiner:
        return cls(dict(state["calibration"]), frozenset(state["two_sided"]))
