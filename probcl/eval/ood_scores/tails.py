"""Tail probabilities of ID calibration scores and their conservative combination (:class:`TailCombiner`).

Each score becomes a tail probability under its ID calibration distribution, p_s(x) = (1 + #{ID calibration
scores >= s(x)}) / (1 + n) (two-sided where a score can fail both ways); :meth:`TailCombiner.combine` is
-log(min_s p_s / w_s), so an image is flagged as soon as any one score is extreme for ID data (a weighted
Bonferroni, conservative union); ``probcl score`` and the ``ood`` suite weight it
(:func:`probcl.eval.score_table.combination_weights`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from probcl.errors import ConfigError


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

    def state(self) -> dict:
        """Plain tensors and lists (for ``torch.save(weights_only=True)`` caches)."""
        return {"calibration": dict(self.calibration), "two_sided": sorted(self.two_sided)}

    @classmethod
    def from_state(cls, state: dict) -> TailCombiner:
        return cls(dict(state["calibration"]), frozenset(state["two_sided"]))
