"""Synthetic out-of-distribution image sets generated from an in-distribution set.

``noise:gaussian``: i.i.d. pixels from N(mean_c, std_c^2), the reference set's per-channel
pixel statistics, rounded and clipped to 0..255. ``noise:uniform``: i.i.d. pixels uniform on
0..255. ``inverted``: the reference images with contrast inverted (255 - x).
"""
from __future__ import annotations

import torch

from probcl.data.datasets import TensorImages
from probcl.errors import ConfigError

GENERATED = ("noise:gaussian", "noise:uniform", "inverted")


def generated_set(kind: str, reference: TensorImages, seed: int = 0) -> TensorImages:
    """A synthetic OOD set of the reference's size and shape (unlabeled); deterministic for ``seed``."""
    images = reference.images
    generator = torch.Generator().manual_seed(seed)
    if kind == "noise:gaussian":
        pixels = images.float().transpose(0, 1).reshape(images.shape[1], -1)
        mean, std = pixels.mean(1).view(1, -1, 1, 1), pixels.std(1).view(1, -1, 1, 1)
        out = (torch.randn(images.shape, generator=generator) * std + mean).round().clamp(0, 255).to(torch.uint8)
    elif kind == "noise:uniform":
        out = torch.randint(0, 256, images.shape, generator=generator, dtype=torch.uint8)
    elif kind == "inverted":
        out = 255 - images
    else:
        raise ConfigError(f"unknown generated OOD set {kind!r}; valid: {', '.join(GENERATED)}")
    return TensorImages(out, None, kind)
