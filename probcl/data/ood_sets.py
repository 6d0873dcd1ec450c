"""Synthetic out-of-distribution image sets generated from an in-distribution set (the OOD battery).

Far OOD (nothing like the data):

- ``noise:gaussian``: i.i.d. pixels from N(mean_c, std_c^2), the reference set's per-channel
  pixel statistics, rounded and clipped to 0..255.
- ``noise:uniform``: i.i.d. pixels uniform on 0..255.
- ``blank``: constant images, one random grey level (or colour) each.
- ``colour-blocks``: 64 x 48 RGB images of 4 x 3 random-colour blocks, brought to the reference's
  size and channels as any user image would be.

Derived from the data (the content is there, its appearance is not):

- ``inverted``: contrast inverted (255 - x).
- ``blurred``: Gaussian blur with sigma = 10 % of the side.
- ``low-contrast``: pixels pulled to their image's mean, (x - m) * 0.1 + m.

Near OOD needs no generator: hold classes out with a class filter (train on
``fashion-mnist:classes=0-7``, the OOD set is ``fashion-mnist:classes=8,9``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from probcl.data.sources import TensorImages, conform
from probcl.errors import ConfigError

Generator = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


def _gaussian_noise(images: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    pixels = images.float().transpose(0, 1).reshape(images.shape[1], -1)
    mean, std = pixels.mean(1).view(1, -1, 1, 1), pixels.std(1).view(1, -1, 1, 1)
    return (torch.randn(images.shape, generator=g) * std + mean).round().clamp(0, 255).to(torch.uint8)


def _uniform_noise(images: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    return torch.randint(0, 256, images.shape, generator=g, dtype=torch.uint8)


def _blank(images: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    levels = torch.randint(0, 256, (len(images), images.shape[1], 1, 1), generator=g, dtype=torch.uint8)
    return levels.expand(images.shape).contiguous()


def _colour_blocks(images: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    blocks = torch.randint(0, 256, (len(images), 3, 3, 4), generator=g, dtype=torch.uint8)
    rgb = blocks.repeat_interleave(16, dim=2).repeat_interleave(16, dim=3)  # (N, 3, 48, 64)
    square = F.interpolate(rgb.float(), size=(64, 64), mode="nearest").round().to(torch.uint8)
    return conform(TensorImages(square, None, "colour-blocks"), images.shape[1], images.shape[-1]).images


def _inverted(images: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    return 255 - images


def _blurred(images: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    sigma = 0.1 * images.shape[-1]
    radius = min(math.ceil(3 * sigma), images.shape[-1] - 1)
    t = torch.arange(-radius, radius + 1, dtype=torch.float32)
    kernel = torch.exp(-(t**2) / (2 * sigma**2))
    kernel = kernel / kernel.sum()
    c = images.shape[1]
    x = images.float()
    x = F.conv2d(
        F.pad(x, (radius, radius, 0, 0), mode="replicate"), kernel.view(1, 1, 1, -1).repeat(c, 1, 1, 1), groups=c
    )
    x = F.conv2d(
        F.pad(x, (0, 0, radius, radius), mode="replicate"), kernel.view(1, 1, -1, 1).repeat(c, 1, 1, 1), groups=c
    )
    return x.round().clamp(0, 255).to(torch.uint8)


def _low_contrast(images: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    x = images.float()
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    return ((x - mean) * 0.1 + mean).round().clamp(0, 255).to(torch.uint8)


GENERATORS: dict[str, Generator] = {
    "noise:gaussian": _gaussian_noise,
    "noise:uniform": _uniform_noise,
    "blank": _blank,
    "colour-blocks": _colour_blocks,
    "inverted": _inverted,
    "blurred": _blurred,
    "low-contrast": _low_contrast,
}
GENERATED = tuple(GENERATORS)
FAR_OOD = ("noise:gaussian", "noise:uniform", "blank", "colour-blocks")


def generated_set(kind: str, reference: TensorImages, seed: int = 0) -> TensorImages:
    """A synthetic OOD set of the reference's size and shape (unlabeled); deterministic for ``seed``."""
    if kind not in GENERATORS:
        raise ConfigError(f"unknown generated OOD set {kind!r}; valid: {', '.join(GENERATED)}")
    generator = torch.Generator().manual_seed(seed)
    return TensorImages(GENERATORS[kind](reference.images, generator), None, kind)
