"""Batched, per-sample random view generation on the training device (crop and flip: :mod:`probcl.data.crop`;
colour, blur, solarize and noise: kornia).

``ViewGenerator`` turns a uint8 batch into two independently augmented, normalized float
views. Each preset follows one paper's recipe; every sample in a batch draws its own
crop, flip, jitter, ... parameters. ``Normalizer`` is the evaluation transform.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import kornia.augmentation as K
import torch
from torch import nn

from probcl.config import VIEW_PRESETS, AugmentConfig, ViewParams
from probcl.data.crop import RandomResizedCropFlip


def resolve_view_params(cfg: AugmentConfig) -> ViewParams:
    """The preset named in ``cfg`` with the config's explicit overrides applied."""
    params = VIEW_PRESETS[cfg.preset]
    overrides = {
        name: getattr(cfg, name)
        for name in ("crop_scale", "flip", "jitter_prob", "grayscale_prob", "blur_prob", "solarize_prob", "noise_std")
        if getattr(cfg, name) is not None
    }
    if cfg.jitter_strength is not None:
        s = cfg.jitter_strength
        overrides["jitter"] = (0.8 * s, 0.8 * s, 0.8 * s, 0.2 * s)
    return dataclasses.replace(params, **overrides)


class Normalizer(nn.Module):
    """uint8 or [0, 1] float images -> normalized network input, and back."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, mean: list[float], std: list[float]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)

    @staticmethod
    def to_unit(x: torch.Tensor) -> torch.Tensor:
        """uint8 -> float in [0, 1]; float input is assumed to be in [0, 1] already."""
        return x.float().div_(255.0) if x.dtype == torch.uint8 else x.float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.to_unit(x) - self.mean) / self.std

    def inverse(self, x: torch.Tensor) -> torch.Tensor:
        """Normalized input -> [0, 1] pixel scale."""
        return x * self.std + self.mean

    def bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-channel (low, high) of valid pixels in normalized space, shaped (1, C, 1, 1)."""
        return (0.0 - self.mean) / self.std, (1.0 - self.mean) / self.std


def _pipeline(p: ViewParams, view: int, size: int, channels: int) -> nn.Module:
    ops: list[Any] = []  # the crop and flip in one sampling pass, then kornia augmentations
    if p.crop_scale != (1.0, 1.0) or p.flip > 0:
        ops.append(RandomResizedCropFlip(size, p.crop_scale, flip=p.flip))
    b, c, s, h = p.jitter
    if channels == 1:
        s, h = 0.0, 0.0  # saturation and hue are undefined on one channel
    if p.jitter_prob > 0 and any((b, c, s, h)):
        ops.append(K.ColorJitter(b, c, s, h, p=p.jitter_prob))
    if channels == 3 and p.grayscale_prob > 0:
        ops.append(K.RandomGrayscale(p=p.grayscale_prob))
    if p.blur_prob[view] > 0:
        kernel = max(3, int(0.1 * size) // 2 * 2 + 1)  # ~10% of the image side, odd
        ops.append(K.RandomGaussianBlur((kernel, kernel), p.blur_sigma, p=p.blur_prob[view]))
    if p.solarize_prob[view] > 0:
        ops.append(K.RandomSolarize(thresholds=0.0, additions=0.0, p=p.solarize_prob[view]))
    if p.noise_std > 0:
        ops.append(K.RandomGaussianNoise(std=p.noise_std, p=1.0))
    return nn.Sequential(*ops) if ops else nn.Identity()


class ViewGenerator(nn.Module):
    """Two randomly augmented, normalized views of a uint8 batch, made on the batch's device."""

    def __init__(self, params: ViewParams, image_size: int, channels: int, normalizer: Normalizer) -> None:
        super().__init__()
        self.params = params
        self.pipelines = nn.ModuleList([_pipeline(params, v, image_size, channels) for v in (0, 1)])
        self.normalizer = normalizer

    def view(self, x: torch.Tensor, which: int = 0) -> torch.Tensor:
        """One augmented, normalized view (``which`` selects the t / t' recipe)."""
        return self.normalizer(self.pipelines[which](Normalizer.to_unit(x)))

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.view(x, 0), self.view(x, 1)
