"""The in-distribution (ID) reference of the OOD scores: shared by the ``ood`` suite and ``probcl score``.

:func:`fit_reference` needs ID images only, never an OOD example:

1. **fit** (:func:`fit_data`, then each registered score's ``fit``, :data:`~probcl.eval.ood_scores.SCORES`) on
   the training split (the seeded ``max_train`` subset): the features, labels and input statistics, a linear
   head when there is one, and what the method declares: the unit encoder means of a
   :class:`StochasticEncoder` and the energy reference of an :class:`EnergyModel`;
2. **calibrate** on held-out ID images (:class:`~probcl.eval.ood_scores.calibration.Calibration`): tail
   distributions from one seeded half, the threshold of every decision statistic from the other.

The combined score is a weighted Bonferroni (min-p) combination (:func:`combination_weights`): the
scores that measure distance in the representation (kNN, Mahalanobis) share 95 % of the false-alarm
budget, the guards against degenerate inputs (feature norm, input statistics, the method's own score)
5 %. Equal weights let the guards' chance tails on ID images outrank near-OOD images: on held-out
FMNIST classes the equal-weight combination lost 0.06 AUROC to Mahalanobis alone, the weighted one
0.01, with every far-OOD set still at AUROC >= 0.996 (docs/results/ood-battery).

:class:`IdReference` then scores any batch of images (:meth:`IdReference.scores`), decides and flags through its
calibration, describes itself (:meth:`IdReference.protocol`) and round-trips through plain tensors
(:meth:`IdReference.state`) so that ``probcl score`` can cache it in the run directory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

import torch

from probcl.config import AtLeast, InRange, Seed, check_bounds
from probcl.data.sources import ImageSource
from probcl.errors import ConfigError
from probcl.eval.features import concat_batches
from probcl.eval.knn import neighbours_within
from probcl.eval.ood_scores import SCORES, FitData, ScoreBatch, input_statistics
from probcl.eval.ood_scores.calibration import COMBINED, Calibration, combination_weights, two_sided
from probcl.eval.ood_scores.head import LinearHead
from probcl.eval.ood_scores.registry import COMBINATION_KNN_K, State, combination_knn
from probcl.eval.outlier import DEFAULT_TPR
from probcl.eval.score_table import model_output_fns, with_input_statistics
from probcl.methods.capabilities import EnergyModel, HasUncertainty, StochasticEncoder

if TYPE_CHECKING:  # the context loads models (Lightning); this module's scores must import without it
    from probcl.eval.context import ModelOnData

ENERGY_REFERENCE_SIZE = 4096  # training images whose projections define the image energy
STATE_FORMAT = 3  # the layout of :meth:`IdReference.state` (2: before the score registry)


@dataclass
class ReferenceOptions:
    """What :func:`fit_reference` fits and how it calibrates."""

    knn_k: Annotated[int, AtLeast(1)] = COMBINATION_KNN_K  # neighbours of the default combination's kNN distance
    tpr: Annotated[float, InRange(0, 1, low_open=True)] = DEFAULT_TPR  # share of ID images every threshold accepts
    combination: Sequence[str] | None = None  # scores of the combined score (None: the default combination)
    seed: Seed = 0  # seed of the calibration halves and of the energy reference subset

    def __post_init__(self) -> None:
        check_bounds(self)  # built in code from other options (the ood suite's, `probcl score`'s)


@dataclass
class IdReference:
    """Every applicable registered score's fitted state (column order), and the calibration once calibrated."""

    states: dict[str, State]
    knn_k: int = COMBINATION_KNN_K
    fit_size: int = 0  # training images fitted on
    calibration: Calibration | None = None
    shared: dict[Any, Any] = field(default_factory=dict, init=False, repr=False)  # per-reference memo of the scores

    @classmethod
    def fit(cls, data: FitData, knn_k: int = COMBINATION_KNN_K, extra: Sequence[str] = ()) -> IdReference:
        """Fit every registered score that applies to ``data``, and the scores ``extra`` (e.g. ``knn200``)."""
        return cls(SCORES.available(data, [combination_knn(knn_k), *extra]), knn_k, len(data.features))

    @property
    def score_names(self) -> list[str]:
        """Every score computed, in column order."""
        return list(self.states)

    @property
    def notes(self) -> list[str]:
        """What the user should know about the fitted scores: each kNN distance with more neighbours than the
        training features fitted on, which used them all."""
        notes: list[str] = []
        for name in self.score_names:
            k = SCORES.get(name).neighbours
            if k is not None:
                neighbours_within(k, self.fit_size, name, notes.append)
        return notes

    # ----------------------------------------------------------------- scores
    def model_output_fns(self, ctx: ModelOnData) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
        """:func:`model_output_fns` of ``ctx``'s model with this reference's energy reference."""
        energy_reference = self.states.get("image_energy", {}).get("reference")
        if energy_reference is not None:
            energy_reference = energy_reference.to(ctx.torch_device)
        return model_output_fns(ctx.encoder, ctx.embed_fn(), energy_reference)

    @torch.no_grad()
    def outputs(self, ctx: ModelOnData, images: torch.Tensor) -> dict[str, torch.Tensor]:
        """:meth:`model_output_fns` of a uint8 batch plus the input statistics, as float32 on the CPU."""
        x = images.to(ctx.torch_device)
        out = {name: fn(x) for name, fn in self.model_output_fns(ctx).items()}
        return with_input_statistics(out, images)

    def scores(self, outputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Every score of a batch's :meth:`outputs`."""
        batch = ScoreBatch(outputs, self.shared)
        return {name: SCORES.get(name).score(state, batch) for name, state in self.states.items()}

    def collect(self, ctx: ModelOnData, data: ImageSource, description: str) -> dict[str, torch.Tensor]:
        """Features, labels and scores of every readable image of ``data``."""
        return concat_batches(
            (
                {"features": out["features"], "labels": labels, **self.scores(out)}
                for images, labels, _, _ in ctx.batches(data, description)
                if images is not None
                for out in [self.outputs(ctx, images)]
            ),
            data.name,
        )

    # ----------------------------------------------------------------- calibration, decisions, flags
    def calibrate(
        self, id_scores: dict[str, torch.Tensor], combination: Sequence[str] | None, tpr: float, seed: int
    ) -> None:
        """Tail distributions from a seeded half of held-out ID scores, thresholds from the other half."""
        chosen = self._combination(combination)
        self.calibration = Calibration.fit(id_scores, self.score_names, chosen, tpr, seed)

    def _combination(self, requested: Sequence[str] | None) -> list[str]:
        names = self.score_names
        if requested:
            unknown = [s for s in requested if s not in names]
            if unknown:
                raise ConfigError(
                    f"unknown score(s) {', '.join(unknown)} in the combination; valid for this run: {', '.join(names)}"
                )
            return list(dict.fromkeys(requested))
        combination = SCORES.default_combination(names, self.knn_k)
        if not combination:
            raise ConfigError(
                f"none of the default combination's scores is available; name the combination's "
                f"scores (valid: {', '.join(names)})"
            )
        return combination

    @property
    def calibrated(self) -> Calibration:
        if self.calibration is None:
            raise ConfigError("the ID reference is not calibrated yet")
        return self.calibration

    @property
    def combination(self) -> list[str]:
        return self.calibrated.combination

    @property
    def thresholds(self) -> dict[str, float]:
        return self.calibrated.thresholds

    def decision(self, scores: dict[str, torch.Tensor], score: str = COMBINED) -> dict[str, torch.Tensor]:
        """:meth:`Calibration.decision`."""
        return self.calibrated.decision(scores, score)

    def weights(self, score: str = COMBINED) -> dict[str, float]:
        """:meth:`Calibration.weights`."""
        return self.calibrated.weights(score)

    def tail_thresholds(self, score: str = COMBINED) -> dict[str, float]:
        """:meth:`Calibration.tail_thresholds`."""
        return self.calibrated.tail_thresholds(score)

    def flags(self, decision: dict[str, torch.Tensor], score: str = COMBINED) -> tuple[torch.Tensor, list[str]]:
        """:meth:`Calibration.flags`."""
        return self.calibrated.flags(decision, score)

    def most_unusual(self, decision: dict[str, torch.Tensor]) -> list[str]:
        """:meth:`Calibration.most_unusual`."""
        return self.calibrated.most_unusual(decision)

    # ----------------------------------------------------------------- description
    def protocol(self) -> dict:
        """What the scores and thresholds are, for result sidecars."""
        sizes, notes = self.calibrated.sizes, self.notes
        return {
            "scores": {name: SCORES.get(name).description for name in self.score_names},
            "fit": f"{self.fit_size} training images",
            "tail_probability": "p_s(x) = (1 + #{ID calibration scores >= s(x)}) / (1 + n), two-sided (doubled "
            "smaller tail) for " + (", ".join(filter(two_sided, self.score_names))),
            "combined": "-log min_s p_s / w_s (weighted Bonferroni), w = "
            + ", ".join(f"{name} {w:.4g}" for name, w in combination_weights(self.combination).items()),
            "calibration": f"held-out ID images: {sizes.get('tails')} for the tail distributions, "
            f"{sizes.get('thresholds')} for the thresholds (split-conformal quantile)",
            **({"notes": notes} if notes else {}),
        }

    # ----------------------------------------------------------------- persistence
    def state(self) -> dict:
        """Plain tensors, numbers, strings and containers of them (``torch.load(weights_only=True)``-safe)."""
        return {
            "format": STATE_FORMAT,
            "states": self.states,
            "knn_k": self.knn_k,
            "fit_size": self.fit_size,
            "calibration": self.calibrated.state(),
        }

    @classmethod
    def from_state(cls, state: dict) -> IdReference:
        if state.get("format") != STATE_FORMAT:
            raise ConfigError(
                f"this fitted ID reference was saved in format {state.get('format', 2)} by an older probcl "
                f"(this one reads format {STATE_FORMAT}); delete the run's score-cache/ folder or pass --no-cache"
            )
        unknown = [name for name in state["states"] if name not in SCORES]
        if unknown:
            raise ConfigError(f"the saved ID reference has scores this probcl does not register: {', '.join(unknown)}")
        return cls(
            dict(state["states"]), state["knn_k"], state["fit_size"], Calibration.from_state(state["calibration"])
        )


@torch.no_grad()
def fit_data(ctx: ModelOnData, seed: int, head: LinearHead | None = None) -> FitData:
    """What the scores are fitted on: one pass over ``ctx``'s training split (see the module docstring)."""
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
    return FitData(
        bank.float(),
        labels.long(),
        torch.cat(stats),
        head,
        torch.cat(means) if means else None,
        float(model.encoder_concentration) if isinstance(model, StochasticEncoder) else None,
        torch.cat(energy_ref) if energy_ref else None,
        list(model.uncertainty_scores) if isinstance(model, HasUncertainty) else [],
    )


def fit_reference(
    ctx: ModelOnData,
    calibration: ImageSource,
    options: ReferenceOptions | None = None,
    head: LinearHead | None = None,
    extra: Sequence[str] = (),
) -> tuple[IdReference, dict[str, torch.Tensor]]:
    """The reference fitted on ``ctx``'s training split (with the classifier-head scores when ``head`` is given,
    the scores ``extra`` and those the combination names, e.g. ``knn25``) and calibrated on the held-out ID images
    ``calibration``; also returns their features, labels and scores."""
    o = options or ReferenceOptions()
    reference = IdReference.fit(fit_data(ctx, o.seed, head), o.knn_k, [*extra, *(o.combination or [])])
    for note in reference.notes:
        ctx.note(note)
    id_out = reference.collect(ctx, calibration, f"ID calibration: {calibration.name}")
    reference.calibrate(id_out, o.combination, o.tpr, o.seed)
    return reference, id_out
