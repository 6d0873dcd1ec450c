"""The OOD scores' table: every score's name and meaning, which a model declares through its capabilities,
how the combined score weighs them, and which an image can fail in both directions.

:mod:`probcl.eval.id_reference` fits and calibrates them; the ``ood`` suite and ``probcl score`` name and
compute them from here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import torch

from probcl.errors import ConfigError
from probcl.eval.ood_scores import input_statistics
from probcl.methods.capabilities import EnergyModel, HasUncertainty, StochasticEncoder
from probcl.models.inference import Inference

if TYPE_CHECKING:
    from probcl.methods.base import SSLMethod
    from probcl.models.encoder import ForeignEncoder

COMBINED = "combined"
# What each score measures (higher = more OOD); {k} is the kNN neighbour count.
SCORE_DOCS = {
    "knn{k}": "mean Euclidean distance to the k nearest L2-normalized training features",
    "knn{k}_raw": "mean Euclidean distance to the k nearest training features (not normalized)",
    "feature_norm": "L2 norm of the features (two-sided: too large or too small)",
    "mahalanobis": "squared Mahalanobis distance to the nearest class mean, pooled class covariance (Lee et al. 2018)",
    "mahalanobis_classfree": "squared Mahalanobis distance to the mean of one Gaussian of all training features",
    "input_stats": "squared Mahalanobis distance of 7 pixel statistics (mean, spread, saturation, edges, entropy, "
    "colour) to their training Gaussian",
    "vmf_density": "-log of the vMF kernel density, with the encoder's concentration, of the encoder mean over the "
    "training encoder means (StochasticEncoder methods)",
    "image_energy": "the model's image energy E(x) with the training images as reference (EnergyModel methods; "
    "two-sided)",
    "uncertainty:NAME": "the method's own uncertainty score NAME (HasUncertainty methods; two-sided)",
}
# The default combination: every score that catches a kind of OOD the others miss on the battery (README),
# and the method's own where it declares one. "mahalanobis" falls back to its class-free form on unlabeled data.
DEFAULT_COMBINATION = ("knn{k}", "feature_norm", "mahalanobis", "input_stats")
GUARD_SHARE = 0.05  # of the combined score's false-alarm budget, shared by the scores that are not distances


def is_distance_score(name: str) -> bool:
    """kNN and Mahalanobis distances in the representation (the combination's main scores)."""
    return name.startswith(("knn", "mahalanobis"))


def combination_weights(combination: Sequence[str]) -> dict[str, float]:
    """Bonferroni weights w_s (summing to 1) of the combined score -log min_s (p_s / w_s): the distance scores
    share 1 - GUARD_SHARE, the guards GUARD_SHARE; equal weights when the combination has only one kind."""
    distances = [s for s in combination if is_distance_score(s)]
    guards = [s for s in combination if not is_distance_score(s)]
    if not distances or not guards:
        return {s: 1.0 / len(combination) for s in combination}
    return {
        **{s: (1.0 - GUARD_SHARE) / len(distances) for s in distances},
        **{s: GUARD_SHARE / len(guards) for s in guards},
    }


UNCERTAINTY = "uncertainty:"  # the column prefix of a HasUncertainty method's own scores
TWO_SIDED = ("feature_norm", "image_energy")  # besides the method's own uncertainty: fail too high or too low


@dataclass(frozen=True)
class CapabilityScore:
    """A score that a declared capability adds to the reference, beside the feature scores every encoder has."""

    name: str  # its column (``vmf_density``, ``image_energy``, ``uncertainty:NAME``)
    output: str  # the model output it reads (a key of :func:`model_output_fns`)
    fn: Callable[[torch.Tensor], torch.Tensor] | None  # images on the model's device -> that output (None: needs a fit)


def capability_scores(model: object, energy_reference: torch.Tensor | None = None) -> list[CapabilityScore]:
    """The capability -> score table of ``model``, in column order: what each declared capability scores, which
    output it reads and how (:func:`two_sided` says which an image can fail in both directions). Every consumer
    (the ``ood`` suite, ``probcl score``, the scoring-network export) derives its names and outputs from it."""
    table = []
    if isinstance(model, StochasticEncoder):
        table.append(CapabilityScore("vmf_density", "encoder_mean", model.encoder_mean))
    if isinstance(model, EnergyModel) and isinstance(model, Inference):  # an energy of normalized inputs
        energy_model = model
        energy = (
            None
            if energy_reference is None
            else lambda x: energy_model.image_energy(energy_model.normalizer(x), energy_reference)
        )
        table.append(CapabilityScore("image_energy", "image_energy", energy))
    if isinstance(model, HasUncertainty):
        for name in model.uncertainty_scores:
            fn = partial(model.uncertainty_batch, score=name)
            table.append(CapabilityScore(f"{UNCERTAINTY}{name}", f"{UNCERTAINTY}{name}", fn))
    return table


def method_uncertainty_fns(model: object) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """``{"uncertainty:NAME": images -> scores}`` for each score a :class:`HasUncertainty` method declares
    (e.g. TaU's ``neg_u`` / ``neg_u_squared``); empty for other methods."""
    return {s.output: s.fn for s in capability_scores(model) if s.fn is not None and s.name.startswith(UNCERTAINTY)}


def model_output_fns(
    model: SSLMethod | ForeignEncoder,
    embed: Callable[[torch.Tensor], torch.Tensor],
    energy_reference: torch.Tensor | None = None,
) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """What the scores need from ``model``, by name: images on its device -> ``features`` (``embed``) and the
    declared capabilities' outputs (``probcl score`` exports exactly these for its repeat calls)."""
    outputs = {s.output: s.fn for s in capability_scores(model, energy_reference) if s.fn is not None}
    return {"features": embed, **outputs}


def score_names(model: object, k: int, labeled: bool) -> list[str]:
    """Every score of the reference for ``model`` (in column order); ``mahalanobis`` needs labeled training data."""
    names = [
        f"knn{k}",
        f"knn{k}_raw",
        "feature_norm",
        *(["mahalanobis"] if labeled else []),
        "mahalanobis_classfree",
        "input_stats",
    ]
    return names + [s.name for s in capability_scores(model)]


def check_names(requested: Sequence[str], valid: Sequence[str], what: str) -> None:
    """ConfigError naming the ``valid`` scores when one of ``requested`` is not among them."""
    unknown = [s for s in requested if s not in valid]
    if unknown:
        raise ConfigError(f"unknown score(s) {', '.join(unknown)} {what}; valid for this run: {', '.join(valid)}")


def with_input_statistics(model_outputs: dict[str, torch.Tensor], images: torch.Tensor) -> dict[str, torch.Tensor]:
    """A batch's model outputs (float32, on the CPU) with the input statistics of its uint8 ``images``."""
    out = {name: value.float().cpu() for name, value in model_outputs.items()}
    out["input_stats"] = input_statistics(images.cpu())
    return out


def two_sided(name: str) -> bool:
    """Scores an image can fail in both directions (e.g. noise that TaU calls *more* certain than any digit):
    the two-sided feature scores and, by the capability table, the energy and every method's own uncertainty."""
    return name in TWO_SIDED or name.startswith(UNCERTAINTY)
