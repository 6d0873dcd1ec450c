"""What the OOD scores need from a model: the capability -> score table (which declared capability adds which
score, and the model output it reads), the outputs to compute or export, and the input statistics of a batch.

The scores themselves (names, meaning, fit, scoring) are registered in :data:`probcl.eval.ood_scores.SCORES`;
:mod:`probcl.eval.id_reference` fits and calibrates them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import torch

from probcl.errors import ConfigError
from probcl.eval.ood_scores.entries import UNCERTAINTY
from probcl.eval.ood_scores.statistics import input_statistics
from probcl.methods.capabilities import EnergyModel, HasUncertainty, StochasticEncoder
from probcl.models.inference import Inference

if TYPE_CHECKING:
    from probcl.methods.base import SSLMethod
    from probcl.models.encoder import ForeignEncoder


@dataclass(frozen=True)
class CapabilityScore:
    """A score that a declared capability adds to the reference, beside the feature scores every encoder has."""

    name: str  # its column (``vmf_density``, ``image_energy``, ``uncertainty:NAME``)
    output: str  # the model output it reads (a key of :func:`model_output_fns`)
    fn: Callable[[torch.Tensor], torch.Tensor] | None  # images on the model's device -> that output (None: needs a fit)


def capability_scores(model: object, energy_reference: torch.Tensor | None = None) -> list[CapabilityScore]:
    """The capability -> score table of ``model``, in column order: what each declared capability scores, which
    output it reads and how (the registry, :data:`~probcl.eval.ood_scores.SCORES`, says what each score means).
    Every consumer (the ``ood`` suite, ``probcl score``, the scoring-network export) derives its outputs from it."""
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
