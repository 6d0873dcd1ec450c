"""What a trained method can do besides embedding images: capabilities it *declares* by inheriting them.

Every method is an :class:`~probcl.methods.base.SSLMethod` (``embed``, ``project``). The
probabilistic ones add one or more of the mixins below, and every consumer (the ``ood`` and
``lipschitz`` suites, ``probcl score``, ``probcl sample``, reports) asks
``isinstance(model, Capability)``; nothing probes a model with ``hasattr``/``getattr``.

- :class:`HasUncertainty`: named per-image uncertainty scores (higher = more uncertain).
- :class:`DirectionalEncoder`: the unit mean direction of the encoder e(z|x) that the objective
  compares (CEB's view of a deterministic method: a vMF with an unstated concentration).
- :class:`StochasticEncoder`: a von Mises-Fisher encoder e(z|x) = vMF(mean(x), kappa_e).
- :class:`EnergyModel`: an image energy E(x) and the SGLD settings that sample from exp(-E).

Images are uint8 or [0, 1] float tensors (N, C, H, W), as for ``embed_batch``, unless a method says
it takes *normalized* network inputs. ``uncertainty`` is, like ``embed``, a public entry point
(no autograd, in batches, any images: :mod:`probcl.models.inference`) over the method's
differentiable ``uncertainty_batch``.

Asking a model for a capability it does not declare (``model.uncertainty(x)`` on a SimCLR run) raises one
:class:`MissingCapability` naming the methods that declare it (:func:`missing_capability`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from probcl.config import INFERENCE_BATCH_SIZE
from probcl.errors import ConfigError
from probcl.samplers.sgld import MSGLDConfig

if TYPE_CHECKING:
    from probcl.models.inference import ImageInput


class HasUncertainty(ABC):
    """A method with its own per-image uncertainty; ``uncertainty_scores[0]`` is the default score."""

    uncertainty_scores: ClassVar[tuple[str, ...]]

    if TYPE_CHECKING:  # provided by Inference, which every method inherits through SSLMethod

        def infer(
            self, fn: Callable[[torch.Tensor], Any], images: ImageInput, batch_size: int = ...
        ) -> torch.Tensor: ...

    @abstractmethod
    def uncertainty_batch(self, images: torch.Tensor, score: str) -> torch.Tensor:
        """Per-image uncertainty (N,) of one batch, with autograd; ``score``: one of ``uncertainty_scores``."""

    def uncertainty(
        self, images: ImageInput, score: str | None = None, batch_size: int = INFERENCE_BATCH_SIZE
    ) -> torch.Tensor:
        """Per-image uncertainty (N,) of ``images`` (as for ``embed``), higher = more uncertain, without
        autograd; ``score`` is one of ``uncertainty_scores`` (default: the first).

        Read it as the method's own opinion, not as an out-of-distribution detector: TaU's temperature
        (measured on Fashion-MNIST, README "The papers' claims, re-tested") follows the feature norm and ranks
        Gaussian noise as the *most certain* input of all (AUROC 0.000). To flag unusual images use
        ``probcl score``, whose combined score includes this one."""
        name = self.uncertainty_score_name(score)
        return self.infer(partial(self.uncertainty_batch, score=name), images, batch_size)

    def uncertainty_score_name(self, score: str | None = None) -> str:
        """``score`` checked against ``uncertainty_scores`` (None = the default score)."""
        if score is None:
            return self.uncertainty_scores[0]
        if score not in self.uncertainty_scores:
            raise ConfigError(
                f"unknown uncertainty score {score!r} for {type(self).__name__}; "
                f"valid: {', '.join(self.uncertainty_scores)}"
            )
        return score


class DirectionalEncoder(ABC):
    """An encoder whose output the objective compares as a unit direction (CEB paper Eq. 13-14)."""

    @abstractmethod
    def encoder_mean(self, images: torch.Tensor) -> torch.Tensor:
        """Unit mean directions (N, d) of e(z|x)."""


class StochasticEncoder(DirectionalEncoder):
    """A von Mises-Fisher encoder e(z|x) = vMF(encoder_mean(x), encoder_concentration) (CEB Eq. 14)."""

    @property
    @abstractmethod
    def encoder_concentration(self) -> float:
        """kappa_e of e(z|x)."""


class EnergyModel(ABC):
    """An energy-based model of images: q(x) ~ exp(-E(x; reference)), sampled with proximal SGLD."""

    @abstractmethod
    def energy_reference(self, views: torch.Tensor) -> torch.Tensor:
        """The reference (M, d) that defines the energy, from *normalized* views of real images."""

    @abstractmethod
    def image_energy(self, images: torch.Tensor, z_ref: torch.Tensor) -> torch.Tensor:
        """Energy (N,) of *normalized* network inputs given a reference from :meth:`energy_reference`."""

    @abstractmethod
    def sgld_settings(self) -> MSGLDConfig:
        """The SGLD step size, clamp and noise the model was trained with."""


CAPABILITIES: tuple[type, ...] = (HasUncertainty, DirectionalEncoder, StochasticEncoder, EnergyModel)


class MissingCapability(ConfigError, AttributeError):
    """A capability's attribute asked of a model that does not declare the capability. An AttributeError too,
    so that ``hasattr`` stays False; ask ``isinstance(model, Capability)`` instead of trying."""


def declaring_capability(attribute: str) -> type | None:
    """The capability that declares the public ``attribute`` (``uncertainty`` -> HasUncertainty), or None."""
    if attribute.startswith("_"):
        return None
    for capability in CAPABILITIES:
        if attribute in vars(capability) or attribute in vars(capability).get("__annotations__", {}):
            return capability
    return None


def missing_capability(model: str, attribute: str, methods: Mapping[str, type]) -> MissingCapability | None:
    """The error for ``model`` (a method's name) lacking ``attribute``, naming the ``methods`` (name -> class, the
    registry) that declare its capability; None when ``attribute`` belongs to no capability."""
    capability = declaring_capability(attribute)
    if capability is None:
        return None
    having = sorted(name for name, cls in methods.items() if issubclass(cls, capability))
    return MissingCapability(
        f"{model} has no {attribute}: that is the {capability.__name__} capability, declared by "
        f"{', '.join(having) or 'no registered method'}; load a run of one of those "
        f"(isinstance(model, {capability.__name__}) says whether a model has it)"
    )
