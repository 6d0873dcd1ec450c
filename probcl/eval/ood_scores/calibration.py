"""Calibrating, deciding and flagging: the ID tail distributions and thresholds of fitted OOD scores.

:meth:`Calibration.fit` cuts held-out ID scores into two seeded halves: one gives each score's tail
distribution (:class:`~probcl.eval.ood_scores.tails.TailCombiner`), the other the threshold of every decision
statistic, -log p of one score or the combined -log min_s (p_s / w_s), at the split-conformal quantile
(:func:`~probcl.eval.outlier.threshold_at_tpr`): a new ID image is accepted with probability >= ``tpr``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from probcl.errors import ConfigError
from probcl.eval.ood_scores.registry import SCORES
from probcl.eval.ood_scores.tails import TailCombiner
from probcl.eval.outlier import threshold_at_tpr

COMBINED = "combined"  # the decision statistic of the combination
GUARD_SHARE = 0.05  # of the combined score's false-alarm budget, shared by the guards (input guards, own scores)


def combination_weights(combination: Sequence[str]) -> dict[str, float]:
    """Bonferroni weights w_s (summing to 1) of the combined score -log min_s (p_s / w_s): the scores that are not
    guards (feature distances, the head's) share 1 - GUARD_SHARE, the guards GUARD_SHARE; equal weights when the
    combination has only one of the two."""
    guards = [s for s in combination if SCORES.get(s).guard]
    distances = [s for s in combination if s not in guards]
    if not distances or not guards:
        return {s: 1.0 / len(combination) for s in combination}
    return {
        **{s: (1.0 - GUARD_SHARE) / len(distances) for s in distances},
        **{s: GUARD_SHARE / len(guards) for s in guards},
    }


def two_sided(name: str) -> bool:
    """Whether an image can fail the score ``name`` in both directions (its registry entry says)."""
    return SCORES.get(name).two_sided


@dataclass
class Calibration:
    """The combination, its tail distributions and the threshold of every decision statistic."""

    combination: list[str]
    combiner: TailCombiner
    thresholds: dict[str, float]  # decision statistic (COMBINED or a score) -> threshold on -log (p / w)
    sizes: dict[str, int]  # held-out ID images behind the tails and the thresholds

    @classmethod
    def fit(
        cls, id_scores: dict[str, torch.Tensor], names: Sequence[str], combination: Sequence[str], tpr: float, seed: int
    ) -> Calibration:
        """Tail distributions from a seeded half of held-out ID ``id_scores``, thresholds from the other half."""
        n = len(id_scores[names[0]])
        if n < 2:
            raise ConfigError(f"calibrating the OOD scores needs at least 2 held-out ID images, got {n}")
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
        tails_idx, threshold_idx = perm[: n // 2], perm[n // 2 :]
        combiner = TailCombiner.fit({s: id_scores[s][tails_idx] for s in names}, frozenset(filter(two_sided, names)))
        calibration = cls(list(combination), combiner, {}, {"tails": len(tails_idx), "thresholds": len(threshold_idx)})
        held = {s: id_scores[s][threshold_idx] for s in names}
        calibration.thresholds = {
            score: threshold_at_tpr(calibration.decision(held, score)["ood_score"], tpr) for score in [COMBINED, *names]
        }
        return calibration

    @property
    def names(self) -> list[str]:
        return list(self.combiner.calibration)

    def decision(self, scores: dict[str, torch.Tensor], score: str = COMBINED) -> dict[str, torch.Tensor]:
        """Tail probabilities (``p:NAME``) of every score, the decision statistic ``ood_score`` of ``score``
        (-log p of one score, or -log min_s p_s / w_s over the combination) and its ``-log (p / w)`` per deciding
        score (w = 1 for a single score)."""
        tails = self.combiner.tail_probabilities(scores, self.names)
        neg_log = self.combiner.weighted_surprise(tails, self.weights(score))
        return {
            **{f"p:{n}": t for n, t in tails.items()},  # float64: extrapolated tails go far below float32's range
            "ood_score": torch.stack(list(neg_log.values())).max(0).values,
            **{f"neglogp:{n}": v for n, v in neg_log.items()},
        }

    def weights(self, score: str = COMBINED) -> dict[str, float]:
        """The deciding scores of ``score`` and their weights w_s: the combination's Bonferroni weights, or
        ``{score: 1}`` for a single score; in the combination's order."""
        if score != COMBINED:
            return {score: 1.0}
        weights = combination_weights(self.combination)
        return {name: weights[name] for name in self.combination}

    def tail_thresholds(self, score: str = COMBINED) -> dict[str, float]:
        """The tail probability each deciding score of ``score`` is compared with: an image is flagged by s
        when -log(p_s / w_s) > T, i.e. p_s < w_s exp(-T), T the decision's threshold (0 when T is infinite)."""
        threshold = self.thresholds[score]
        return {name: w * math.exp(-threshold) for name, w in self.weights(score).items()}

    def flags(self, decision: dict[str, torch.Tensor], score: str = COMBINED) -> tuple[torch.Tensor, list[str]]:
        """(flag per image, and ``;``-joined names of the deciding scores whose -log p crossed the threshold)."""
        threshold = self.thresholds[score]
        deciders = list(self.weights(score))
        crossed = torch.stack([decision[f"neglogp:{n}"] > threshold for n in deciders], dim=1)
        return crossed.any(1), [";".join(n for n, c in zip(deciders, row) if c) for row in crossed.tolist()]

    def most_unusual(self, decision: dict[str, torch.Tensor]) -> list[str]:
        """The combination's score with the smallest weighted tail probability p / w, per image (``decision``
        of the combined score)."""
        surprise = torch.stack([decision[f"neglogp:{n}"] for n in self.combination], dim=1)
        return [self.combination[i] for i in surprise.argmax(1).tolist()]

    def state(self) -> dict:
        return {
            "combination": list(self.combination),
            "combiner": self.combiner.state(),
            "thresholds": dict(self.thresholds),
            "sizes": dict(self.sizes),
        }

    @classmethod
    def from_state(cls, state: dict) -> Calibration:
        return cls(
            list(state["combination"]),
            TailCombiner.from_state(state["combiner"]),
            dict(state["thresholds"]),
            dict(state["sizes"]),
        )
