"""The in-distribution (ID) reference of the OOD scores: shared by the ``ood`` suite and ``probcl score``.

:func:`fit_reference` needs ID images only, never an OOD example:

1. **fit** on the training split (the seeded ``max_train`` subset): the feature bank (kNN
   distances), the class-conditional and class-free Gaussians of the features (Mahalanobis), the
   Gaussian of the input statistics, and what the method declares: the unit encoder means of a
   :class:`StochasticEncoder` (a vMF kernel density with the encoder's own concentration) and the
   energy reference of an :class:`EnergyModel` (its image energy);
2. **calibrate** on held-out ID images (the test split): a seeded half gives each score's tail
   distribution (:class:`TailCombiner`), the other half the threshold of every decision statistic,
   -log p of one score or the combined -log min_s (p_s / w_s), at the split-conformal quantile
   (:func:`threshold_at_tpr`): a new ID image is accepted with probability >= ``tpr``.

The combined score is a weighted Bonferroni (min-p) combination (:func:`combination_weights`): the
scores that measure distance in the representation (kNN, Mahalanobis) share 95 % of the false-alarm
budget, the guards against degenerate inputs (feature norm, input statistics, the method's own score)
5 %. Equal weights let the guards' chance tails on ID images outrank near-OOD images: on held-out
FMNIST classes the equal-weight combination lost 0.06 AUROC to Mahalanobis alone, the weighted one
0.01, with every far-OOD set still at AUROC >= 0.996 (docs/results/ood-battery).

:class:`IdReference` then scores any batch of images, and round-trips through plain tensors
(:meth:`IdReference.state`) so that ``probcl score`` can cache it in the run directory.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

import torch
import torch.nn.functional as F

from probcl.config import AtLeast, InRange, Seed, check_bounds
from probcl.data.sources import ImageSource
from probcl.errors import ConfigError
from probcl.eval.features import concat_batches
from probcl.eval.ood_scores import Gaussian, TailCombiner, fit_gaussian, input_statistics
from probcl.eval.outlier import knn_distances, threshold_at_tpr
from probcl.eval.score_table import (
    COMBINED,
    DEFAULT_COMBINATION,
    SCORE_DOCS,
    combination_weights,
    method_uncertainty_fns,
    model_output_fns,
    score_names,
    two_sided,
    with_input_statistics,
)
from probcl.methods.capabilities import EnergyModel, StochasticEncoder

if TYPE_CHECKING:  # the context loads models (Lightning); this module's scores must import without it
    from probcl.eval.context import ModelOnData

ENERGY_REFERENCE_SIZE = 4096  # training images whose projections define the image energy


@dataclass
class ReferenceOptions:
    """What :func:`fit_reference` fits and how it calibrates."""

    k: Annotated[int, AtLeast(1)] = 10  # neighbours of the kNN distances in the combination (TaU paper: 10)
    tpr: Annotated[float, InRange(0, 1, low_open=True)] = 0.95  # share of ID images every threshold accepts
    combination: Sequence[str] | None = None  # scores of the combined score (None: the default combination)
    seed: Seed = 0  # seed of the calibration halves and of the energy reference subset

    def __post_init__(self) -> None:
        check_bounds(self)  # built in code from other options (the ood suite's, `probcl score`'s)


@dataclass
class IdReference:
    """Fitted ID statistics (see the module docstring); ``combiner`` and ``thresholds`` after calibration."""

    bank: torch.Tensor  # (N, d) training features
    labels: torch.Tensor  # (N,) their labels (-1 = unlabeled)
    k: int
    gaussians: dict[str, Gaussian]  # mahalanobis (labeled data), mahalanobis_classfree, input_stats
    uncertainty_names: list[str]  # uncertainty:NAME scores the method declares
    encoder_bank: torch.Tensor | None = None  # (N, e) unit encoder means of a StochasticEncoder
    concentration: float | None = None  # its kappa_e
    energy_reference: torch.Tensor | None = None  # (M, p) of an EnergyModel
    score_names: list[str] = field(default_factory=list)  # every score computed, in column order
    combination: list[str] = field(default_factory=list)
    combiner: TailCombiner | None = None
    thresholds: dict[str, float] = field(default_factory=dict)  # decision statistic -> threshold
    calibration_sizes: dict[str, int] = field(default_factory=dict)
    # float64 copies of the bank (L2-normalized and raw): kNN distances are computed in float64, and converting
    # the bank for every batch would cost more than the distances
    unit_bank: torch.Tensor = field(init=False, repr=False)
    raw_bank: torch.Tensor = field(init=False, repr=False)
    bank_sq: dict[str, torch.Tensor] = field(init=False, repr=False)  # their squared row norms, computed once

    def __post_init__(self) -> None:
        self.raw_bank = self.bank.double()
        self.unit_bank = F.normalize(self.raw_bank, dim=1)
        self.bank_sq = {"unit": self.unit_bank.pow(2).sum(1), "raw": self.raw_bank.pow(2).sum(1)}

    # ----------------------------------------------------------------- scores
    def model_output_fns(self, ctx: ModelOnData) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
        """:func:`model_output_fns` of ``ctx``'s model with this reference's energy reference."""
        energy_reference = None if self.energy_reference is None else self.energy_reference.to(ctx.torch_device)
        return model_output_fns(ctx.encoder, ctx.embed_fn(), energy_reference)

    @torch.no_grad()
    def outputs(self, ctx: ModelOnData, images: torch.Tensor) -> dict[str, torch.Tensor]:
        """:meth:`model_output_fns` of a uint8 batch plus the input statistics, as float32 on the CPU."""
        x = images.to(ctx.torch_device)
        out = {name: fn(x) for name, fn in self.model_output_fns(ctx).items()}
        return with_input_statistics(out, images)

    def scores(self, outputs: dict[str, torch.Tensor], extra_k: Sequence[int] = ()) -> dict[str, torch.Tensor]:
        """Every score (and ``knn{k}`` for each of ``extra_k``) of a batch's :meth:`outputs`."""
        f = outputs["features"]
        ks = tuple(dict.fromkeys((self.k, *extra_k)))
        unit = knn_distances(self.unit_bank, F.normalize(f, dim=1), ks, reference_sq=self.bank_sq["unit"])
        scores = {f"knn{k}": unit[k] for k in ks}
        raw = knn_distances(self.raw_bank, f, (self.k,), reference_sq=self.bank_sq["raw"])
        scores[f"knn{self.k}_raw"] = raw[self.k]
        scores["feature_norm"] = f.norm(dim=1)
        for name, gaussian in self.gaussians.items():
            scores[name] = gaussian.distances(outputs["input_stats"] if name == "input_stats" else f)
        if self.encoder_bank is not None and self.concentration is not None:
            scores["vmf_density"] = vmf_kernel_density_score(
                outputs["encoder_mean"], self.encoder_bank, self.concentration
            )
        for name in ["image_energy", *self.uncertainty_names]:
            if name in outputs:
                scores[name] = outputs[name]
        return scores

    def decision(self, scores: dict[str, torch.Tensor], score: str = COMBINED) -> dict[str, torch.Tensor]:
        """Tail probabilities (``p:NAME``) of every score, the decision statistic ``ood_score`` of ``score``
        (-log p of one score, or -log min_s p_s / w_s over the combination) and its ``-log (p / w)`` per deciding
        score (w = 1 for a single score)."""
        combiner = self._calibrated()
        tails = combiner.tail_probabilities(scores, self.score_names)
        neg_log = combiner.weighted_surprise(tails, self.weights(score))
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

    def collect(
        self, ctx: ModelOnData, data: ImageSource, description: str, extra_k: Sequence[int] = ()
    ) -> dict[str, torch.Tensor]:
        """Features, labels and scores of every readable image of ``data``."""
        return concat_batches(
            (
                self._batch_scores(self.outputs(ctx, images), labels, extra_k)
                for images, labels, _, _ in ctx.batches(data, description)
                if images is not None
            ),
            data.name,
        )

    def _batch_scores(
        self, outputs: dict[str, torch.Tensor], labels: torch.Tensor, extra_k: Sequence[int]
    ) -> dict[str, torch.Tensor]:
        return {"features": outputs["features"], "labels": labels, **self.scores(outputs, extra_k)}

    # ----------------------------------------------------------------- calibration
    def calibrate(
        self, id_scores: dict[str, torch.Tensor], combination: Sequence[str] | None, tpr: float, seed: int
    ) -> None:
        """Tail distributions from a seeded half of held-out ID scores, thresholds from the other half."""
        self.combination = self._combination(combination)
        n = len(id_scores[self.score_names[0]])
        if n < 2:
            raise ConfigError(f"calibrating the OOD scores needs at least 2 held-out ID images, got {n}")
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
        tails_idx, threshold_idx = perm[: n // 2], perm[n // 2 :]
        names = self.score_names
        self.combiner = TailCombiner.fit(
            {s: id_scores[s][tails_idx] for s in names}, frozenset(s for s in names if two_sided(s))
        )
        held = {s: id_scores[s][threshold_idx] for s in names}
        self.thresholds = {
            score: threshold_at_tpr(self.decision(held, score)["ood_score"], tpr) for score in [COMBINED, *names]
        }
        self.calibration_sizes = {"tails": len(tails_idx), "thresholds": len(threshold_idx)}

    def _combination(self, requested: Sequence[str] | None) -> list[str]:
        names = self.score_names
        if requested:
            unknown = [s for s in requested if s not in names]
            if unknown:
                raise ConfigError(
                    f"unknown score(s) {', '.join(unknown)} in the combination; valid for this run: {', '.join(names)}"
                )
            return list(dict.fromkeys(requested))
        chosen = [s.format(k=self.k) for s in DEFAULT_COMBINATION]
        if "mahalanobis" not in names:  # unlabeled training data
            chosen = ["mahalanobis_classfree" if s == "mahalanobis" else s for s in chosen]
        own = [s for s in ("vmf_density", "image_energy") if s in names] + self.uncertainty_names[:1]
        combination = [s for s in chosen + own if s in names]
        if not combination:
            raise ConfigError(
                f"none of the default combination's scores is available; name the combination's "
                f"scores (valid: {', '.join(names)})"
            )
        return combination

    def _calibrated(self) -> TailCombiner:
        if self.combiner is None:
            raise ConfigError("the ID reference is not calibrated yet")
        return self.combiner

    def protocol(self) -> dict:
        """What the scores and thresholds are, for result sidecars."""
        docs = {name.format(k=self.k): doc for name, doc in SCORE_DOCS.items()}
        return {
            "scores": {
                name: docs.get(name) or docs["uncertainty:NAME"].replace("NAME", name.split(":", 1)[-1])
                for name in self.score_names
            },
            "fit": f"{len(self.bank)} training images",
            "tail_probability": "p_s(x) = (1 + #{ID calibration scores >= s(x)}) / (1 + n), two-sided (doubled "
            "smaller tail) for " + (", ".join(s for s in self.score_names if two_sided(s))),
            "combined": "-log min_s p_s / w_s (weighted Bonferroni), w = "
            + ", ".join(f"{name} {w:.4g}" for name, w in combination_weights(self.combination).items()),
            "calibration": f"held-out ID images: {self.calibration_sizes.get('tails')} for the tail distributions, "
            f"{self.calibration_sizes.get('thresholds')} for the thresholds (split-conformal quantile)",
        }

    # ----------------------------------------------------------------- persistence
    def state(self) -> dict:
        """Plain tensors, numbers, strings and containers of them (``torch.load(weights_only=True)``-safe)."""
        return {
            "bank": self.bank,
            "labels": self.labels,
            "k": self.k,
            "gaussians": {name: g.state() for name, g in self.gaussians.items()},
            "uncertainty_names": list(self.uncertainty_names),
            "encoder_bank": self.encoder_bank,
            "concentration": self.concentration,
            "energy_reference": self.energy_reference,
            "score_names": list(self.score_names),
            "combination": list(self.combination),
            "combiner": self._calibrated().state(),
            "thresholds": dict(self.thresholds),
            "calibration_sizes": dict(self.calibration_sizes),
        }

    @classmethod
    def from_state(cls, state: dict) -> IdReference:
        return cls(
            state["bank"],
            state["labels"],
            state["k"],
            {name: Gaussian.from_state(g) for name, g in state["gaussians"].items()},
            list(state["uncertainty_names"]),
            state["encoder_bank"],
            state["concentration"],
            state["energy_reference"],
            list(state["score_names"]),
            list(state["combination"]),
            TailCombiner.from_state(state["combiner"]),
            dict(state["thresholds"]),
            dict(state["calibration_sizes"]),
        )


def vmf_kernel_density_score(
    means: torch.Tensor, bank: torch.Tensor, concentration: float, chunk: int = 256
) -> torch.Tensor:
    """-log (1/N) sum_j exp(kappa (mu . mu_j - 1)): -log of a vMF kernel density at the unit ``means``
    over the ``bank`` of unit means (the normaliser C_d(kappa) dropped: a constant per model)."""
    bank = bank.double()
    out = [
        -(torch.logsumexp(concentration * (q.double() @ bank.T - 1), dim=1) - math.log(len(bank)))
        for q in means.split(chunk)
    ]
    return torch.cat(out).float() if out else means.new_zeros(0)


@torch.no_grad()
def _fit_statistics(ctx: ModelOnData, k: int, seed: int) -> IdReference:
    """Everything fitted on the training split (see the module docstring)."""
    model, device = ctx.encoder, ctx.torch_device
    bank, labels = ctx.features("train")
    train = ctx.dataset(None, "train")
    stats: list[torch.Tensor] = []
    means: list[torch.Tensor] = []
    energy_ref: list[torch.Tensor] = []
    energy_idx = set(train.seeded_indices(ENERGY_REFERENCE_SIZE, seed).tolist())
    for images, _, indices, _ in ctx.batches(train, f"ID reference: {train.name} train"):
        if images is None:
            continue
        stats.append(input_statistics(images))
        x = images.to(device)
        if isinstance(model, StochasticEncoder):
            means.append(model.encoder_mean(x).float().cpu())
        if isinstance(model, EnergyModel):
            keep = torch.tensor([int(i) in energy_idx for i in indices])
            if keep.any():
                energy_ref.append(model.energy_reference(model.normalizer(x[keep.to(device)])).float().cpu())
    gaussians: dict[str, Gaussian] = {}
    if (labels >= 0).any():
        gaussians["mahalanobis"] = fit_gaussian(bank, labels)
    gaussians["mahalanobis_classfree"] = fit_gaussian(bank)
    gaussians["input_stats"] = fit_gaussian(torch.cat(stats))
    return IdReference(
        bank.float(),
        labels.long(),
        k,
        gaussians,
        list(method_uncertainty_fns(model)),
        torch.cat(means) if means else None,
        float(model.encoder_concentration) if isinstance(model, StochasticEncoder) else None,
        torch.cat(energy_ref) if energy_ref else None,
        score_names(model, k, "mahalanobis" in gaussians),
    )


def fit_reference(
    ctx: ModelOnData, calibration: ImageSource, options: ReferenceOptions | None = None, extra_k: Sequence[int] = ()
) -> tuple[IdReference, dict[str, torch.Tensor]]:
    """The reference fitted on ``ctx``'s training split and calibrated on the held-out ID images
    ``calibration``; also returns their features, labels and scores (with ``knn{k}`` for ``extra_k``)."""
    o = options or ReferenceOptions()
    reference = _fit_statistics(ctx, o.k, o.seed)
    id_out = reference.collect(ctx, calibration, f"ID calibration: {calibration.name}", extra_k)
    reference.calibrate(id_out, o.combination, o.tpr, o.seed)
    return reference, id_out
