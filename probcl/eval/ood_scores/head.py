"""A linear classifier head on the features, logits = f W^T + b, and the detectors that read it: maximum
softmax probability, energy, maximum logit and ViM."""

from __future__ import annotations

import torch
from torch import nn

from probcl.eval.linear import LinearProbe


class LinearHead:
    """``weight`` (C, d) and ``bias`` (C,) acting on raw features (float64)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        self.weight, self.bias = weight.detach().double().cpu(), bias.detach().double().cpu()

    @classmethod
    def of_probe(cls, probe: LinearProbe) -> LinearHead:
        """The probe's standardisation folded in: ((f - m) / s) W^T + b = f (W / s)^T + (b - (m / s) W^T)."""
        weight = probe.weight.double() / probe.std.double()
        return cls(weight, probe.bias.double() - weight @ probe.mean.double())

    @classmethod
    def of_linear(cls, layer: nn.Linear) -> LinearHead:
        bias = layer.bias if layer.bias is not None else torch.zeros(layer.out_features)
        return cls(layer.weight, bias)

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        return features.double() @ self.weight.T + self.bias

    def state(self) -> dict[str, torch.Tensor]:
        return {"weight": self.weight, "bias": self.bias}

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor]) -> LinearHead:
        return cls(state["weight"], state["bias"])


def msp(logits: torch.Tensor) -> torch.Tensor:
    """Negated maximum softmax probability (Hendrycks & Gimpel 2017)."""
    return -logits.softmax(1).amax(1)


def energy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Free energy E(x) = -T logsumexp(f(x) / T) of the logits (Liu et al. 2020, Eq. 5)."""
    return -temperature * torch.logsumexp(logits / temperature, dim=1)


def max_logit(logits: torch.Tensor) -> torch.Tensor:
    """Negated maximum logit (Hendrycks et al. 2022)."""
    return -logits.amax(1)


def vim_principal_dim(feature_dim: int) -> int:
    """ViM's principal subspace dimension D: half the feature dimension (OpenOOD's 256 of ResNet-18's 512)."""
    return max(1, feature_dim // 2)


def fit_vim(features: torch.Tensor, head: LinearHead) -> dict[str, torch.Tensor | float]:
    """ViM (Wang et al. 2022): the origin u = -W^+ b, the residual space (the eigenvectors of the uncentred
    covariance of f - u beyond the :func:`vim_principal_dim` largest) and alpha = mean max logit / mean residual
    norm on the training features (Eq. 6)."""
    x = features.double() - (origin := -(torch.linalg.pinv(head.weight) @ head.bias))
    _, vectors = torch.linalg.eigh(x.T @ x / len(x))  # ascending eigenvalues
    residual_space = vectors[:, : x.shape[1] - vim_principal_dim(x.shape[1])]
    alpha = float(head.logits(features).amax(1).mean() / (x @ residual_space).norm(dim=1).mean())
    return {"origin": origin, "residual_space": residual_space, "alpha": alpha}


def vim_score(state: dict, head: LinearHead, features: torch.Tensor) -> torch.Tensor:
    """alpha ||(f - u) R|| - logsumexp(logits): the virtual logit's energy, higher = more OOD (Eq. 7 negated)."""
    residual = ((features.double() - state["origin"]) @ state["residual_space"]).norm(dim=1)
    return state["alpha"] * residual - torch.logsumexp(head.logits(features), dim=1)
