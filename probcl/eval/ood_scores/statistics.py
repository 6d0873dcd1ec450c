"""The fitted statistics the OOD scores share: Gaussians of ID features (Mahalanobis distances) and per-image
input statistics.

- Mahalanobis distance (Lee et al. 2018): class-conditional (class means, one shared covariance, the smallest
  distance over classes) and class-free (one Gaussian), on backbone features.
- Input statistics: a few per-image pixel statistics (mean, spread, saturation, edge energy, histogram entropy)
  scored by a class-free Mahalanobis distance, which catches degenerate images (blank, noise, inverted, wrong
  contrast) whatever the encoder does with them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from probcl.errors import ConfigError

RIDGE = 1e-6  # added to the covariance diagonal (relative to its mean variance): features can be rank-deficient


@dataclass
class Gaussian:
    """Means (K, d) and the inverse of one shared covariance (d, d) of ID features."""

    means: torch.Tensor
    precision: torch.Tensor

    def class_distances(self, x: torch.Tensor) -> torch.Tensor:
        """Squared Mahalanobis distance (N, K) to every mean, in float64."""
        x = x.double()
        columns = []
        for mean in self.means:
            diff = x - mean
            columns.append(((diff @ self.precision) * diff).sum(1))
        return torch.stack(columns, dim=1)

    def distances(self, x: torch.Tensor) -> torch.Tensor:
        """Squared Mahalanobis distance (N,) to the nearest mean."""
        return self.class_distances(x).amin(1).float()

    def state(self) -> dict:
        return {"means": self.means, "precision": self.precision}

    @classmethod
    def from_state(cls, state: dict) -> Gaussian:
        return cls(state["means"], state["precision"])


def fit_gaussian(features: torch.Tensor, labels: torch.Tensor | None = None, unbiased: bool = True) -> Gaussian:
    """Class means and the pooled within-class covariance (one Gaussian when ``labels`` is None), divided by
    N - K (``unbiased``) or N (the maximum-likelihood estimate, as relative Mahalanobis uses)."""
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
    cov = centred.T @ centred / (max(1, len(centred) - len(groups)) if unbiased else len(centred))
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
