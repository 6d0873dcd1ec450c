"""Batched, per-sample random view generation on the training device (crop and flip: :mod:`probcl.data.crop`;
colour, grayscale, blur, solarize and noise: kornia's, or probcl's own in :mod:`probcl.data.intensity`, as
``augment.backend`` chooses: :func:`resolve_backend`).

``ViewGenerator`` turns a uint8 batch into two independently augmented, normalized float
views. Each preset follows one paper's recipe; every sample in a batch draws its own
crop, flip, jitter, ... parameters. ``Normalizer`` is the evaluation transform.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import kornia.augmentation as K
import torch
from torch import nn

from probcl.config import VIEW_PRESETS, AugmentConfig, ViewParams
from probcl.data import intensity
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


def resolve_backend(backend: str, device: torch.device) -> str:
    """The code that makes views on ``device`` under ``augment.backend`` = ``backend``: ``auto`` is ``device``
    (:mod:`probcl.data.intensity`, which reads nothing back from the device) on CUDA, where kornia's reads make
    the host wait for the GPU every step, and ``kornia`` elsewhere: on a CPU a read costs nothing, and kornia keeps
    CPU runs bit-identical to the published ones."""
    if backend != "auto":
        return backend
    return "device" if device.type == "cuda" else "kornia"


class _Ops(NamedTuple):
    """One backend's builders of the random steps after the crop, each from the recipe's values."""

    jitter: Callable[[float, float, float, float, float], nn.Module]  # brightness, contrast, saturation, hue, p
    grayscale: Callable[[float], nn.Module]  # p
    blur: Callable[[int, tuple[float, float], float], nn.Module]  # kernel size, sigma range, p
    solarize: Callable[[float], nn.Module]  # p; pixels at or above 0.5 inverted
    noise: Callable[[float], nn.Module]  # std, on every sample


BACKENDS: dict[str, _Ops] = {
    "kornia": _Ops(
        jitter=lambda b, c, s, h, p: K.ColorJitter(b, c, s, h, p=p),
        grayscale=lambda p: K.RandomGrayscale(p=p),
        blur=lambda kernel, sigma, p: K.RandomGaussianBlur((kernel, kernel), sigma, p=p),
        solarize=lambda p: K.RandomSolarize(thresholds=0.0, additions=0.0, p=p),
        noise=lambda std: K.RandomGaussianNoise(std=std, p=1.0),
    ),
    "device": _Ops(
        jitter=intensity.ColourJitter,
        grayscale=intensity.RandomGrayscale,
        blur=intensity.RandomGaussianBlur,
        solarize=intensity.RandomSolarize,
        noise=intensity.GaussianNoise,
    ),
}


def _pipeline(p: ViewParams, view: int, size: int, channels: int, ops: _Ops) -> nn.Module:
    steps: list[Any] = []  # the crop and flip in one sampling pass, then the backend's colour, blur, ... steps
    if p.crop_scale != (1.0, 1.0) or p.flip > 0:
        steps.append(RandomResizedCropFlip(size, p.crop_scale, flip=p.flip))
    b, c, s, h = p.jitter
    if channels == 1:
        s, h = 0.0, 0.0  # saturation and hue are undefined on one channel
    if p.jitter_prob > 0 and any((b, c, s, h)):
        steps.append(ops.jitter(b, c, s, h, p.jitter_prob))
    if channels == 3 and p.grayscale_prob > 0:
        steps.append(ops.grayscale(p.grayscale_prob))
    if p.blur_prob[view] > 0:
        kernel = max(3, int(0.1 * size) // 2 * 2 + 1)  # ~10% of the image side, odd
        steps.append(ops.blur(kernel, p.blur_sigma, p.blur_prob[view]))
    if p.solarize_prob[view] > 0:
        steps.append(ops.solarize(p.solarize_prob[view]))
    if p.noise_std > 0:
        steps.append(ops.noise(p.noise_std))
    return nn.Sequential(*steps) if steps else nn.Identity()


class ViewGenerator(nn.Module):
    """Two randomly augmented, normalized views of a uint8 batch, made on the batch's device by the backend
    ``augment.backend`` names (:func:`resolve_backend`, from the batch's device for ``auto``).

    Both backends' pipelines are built whatever the setting: kornia's ``RandomSolarize`` keeps its parameter
    ranges in the state dict (``pipelines.*``, as before there were backends), so a checkpoint loads into a model
    of either backend, and ``auto`` picks by the device the batch is on."""

    def __init__(
        self, params: ViewParams, image_size: int, channels: int, normalizer: Normalizer, backend: str = "auto"
    ) -> None:
        super().__init__()
        self.params = params
        self.backend = backend
        self.pipelines = nn.ModuleList([_pipeline(params, v, image_size, channels, BACKENDS["kornia"]) for v in (0, 1)])
        self.device_pipelines = nn.ModuleList(
            [_pipeline(params, v, image_size, channels, BACKENDS["device"]) for v in (0, 1)]
        )
        self.normalizer = normalizer

    def view(self, x: torch.Tensor, which: int = 0) -> torch.Tensor:
        """One augmented, normalized view (``which`` selects the t / t' recipe)."""
        kornia = resolve_backend(self.backend, x.device) == "kornia"
        pipeline = (self.pipelines if kornia else self.device_pipelines)[which]
        return self.normalizer(pipeline(Normalizer.to_unit(x)))

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.view(x, 0), self.view(x, 1)
