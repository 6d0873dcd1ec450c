"""Image corruptions for robustness evaluation, 5 severities each (in the spirit of CIFAR-10-C / MNIST-C).

``corrupt(images, name, severity, seed)`` maps a uint8 batch (N, C, H, W) to a uint8 batch of
the same shape on the same device. Severity constants follow Hendrycks & Dietterich (2019)'s
CIFAR-10-C code; blur and elastic sizes grow with the image side above 32 pixels. The random
draws depend on the seed and the corruption, not on the severity, so that the five severities
of one image differ only in strength.
"""

from __future__ import annotations

import io
import math
import zlib
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from probcl.core.registry import Registry
from probcl.errors import ConfigError

Corruption = Callable[[torch.Tensor, int, torch.Generator], torch.Tensor]
CORRUPTIONS: Registry[Corruption] = Registry("corruption")
SEVERITIES = (1, 2, 3, 4, 5)


def corrupt(images: torch.Tensor, name: str, severity: int, seed: int = 0) -> torch.Tensor:
    """Corruption ``name`` at ``severity`` (1..5) of uint8 images (N, C, H, W); deterministic for ``seed``."""
    if images.dtype != torch.uint8 or images.ndim != 4:
        raise ConfigError(f"corrupt expects uint8 images (N, C, H, W), got {images.dtype} {tuple(images.shape)}")
    if severity not in SEVERITIES:
        raise ConfigError(f"severity must be one of {SEVERITIES}, got {severity}")
    fn = CORRUPTIONS.get(name)
    generator = torch.Generator().manual_seed(zlib.crc32(f"{name}:{seed}".encode()))
    out = fn(images.float() / 255.0, severity - 1, generator)
    return (out * 255.0).round().clamp(0, 255).to(torch.uint8)


def _scale(x: torch.Tensor) -> float:
    """Spatial sizes are CIFAR's (32 px) for images up to 32 px and grow linearly above."""
    return max(1.0, x.shape[-1] / 32.0)


def _rand(shape, generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    return torch.rand(shape, generator=generator).to(like.device)


def _per_channel_conv(x: torch.Tensor, kernels: torch.Tensor) -> torch.Tensor:
    """Convolve each image with its own (k, k) kernel (``kernels``: (N, k, k) or (k, k)), replicate padding."""
    n, c, h, w = x.shape
    if kernels.ndim == 2:
        kernels = kernels.expand(n, -1, -1)
    k = kernels.shape[-1]
    weight = kernels.to(x).repeat_interleave(c, dim=0)[:, None]  # (N*C, 1, k, k)
    padded = F.pad(x.reshape(1, n * c, h, w), (k // 2,) * 4, mode="replicate")
    return F.conv2d(padded, weight, groups=n * c).reshape(n, c, h, w)


def _gaussian_kernel_1d(sigma: float, radius: int) -> torch.Tensor:
    t = torch.arange(-radius, radius + 1, dtype=torch.float64)
    g = torch.exp(-(t**2) / (2 * sigma**2))
    return g / g.sum()


def _gaussian_kernel_2d(sigma: float, radius: int) -> torch.Tensor:
    g = _gaussian_kernel_1d(sigma, radius)
    return g[:, None] * g[None, :]


# ----------------------------------------------------------------------------- noise


@CORRUPTIONS.register("gaussian_noise")
def gaussian_noise(x: torch.Tensor, s: int, generator: torch.Generator) -> torch.Tensor:
    """Additive N(0, c^2) noise per pixel."""
    c = [0.04, 0.06, 0.08, 0.09, 0.10][s]
    return x + torch.randn(x.shape, generator=generator).to(x.device) * c


@CORRUPTIONS.register("shot_noise")
def shot_noise(x: torch.Tensor, s: int, generator: torch.Generator) -> torch.Tensor:
    """Poisson photon noise: Poisson(x * c) / c."""
    c = [500, 250, 100, 75, 50][s]
    return torch.poisson(x.cpu() * c, generator=generator).to(x.device) / c


@CORRUPTIONS.register("impulse_noise")
def impulse_noise(x: torch.Tensor, s: int, generator: torch.Generator) -> torch.Tensor:
    """Salt-and-pepper noise on a fraction c of the pixel values (half 0, half 1)."""
    c = [0.01, 0.02, 0.03, 0.05, 0.07][s]
    u = _rand(x.shape, generator, x)
    return torch.where(u < c / 2, torch.zeros_like(x), torch.where(u < c, torch.ones_like(x), x))


# ----------------------------------------------------------------------------- blur


@CORRUPTIONS.register("defocus_blur")
def defocus_blur(x: torch.Tensor, s: int, generator: torch.Generator) -> torch.Tensor:
    """Convolution with an aliased disk of radius r smoothed by a 3x3 Gaussian of std ``alias``."""
    radius, alias = [(0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1.0, 0.2), (1.5, 0.1)][s]
    radius *= _scale(x)
    half = math.ceil(radius) + 1
    t = torch.arange(-half, half + 1, dtype=torch.float64)
    disk = ((t[:, None] ** 2 + t[None, :] ** 2) <= radius**2).double()
    kernel = F.conv2d(F.pad(disk[None, None], (1, 1, 1, 1)), _gaussian_kernel_2d(alias, 1)[None, None])[0, 0]
    return _per_channel_conv(x, kernel / kernel.sum())


@CORRUPTIONS.register("motion_blur")
def motion_blur(x: torch.Tensor, s: int, generator: torch.Generator) -> torch.Tensor:
    """One-sided Gaussian blur of std ``sigma`` along a random direction in [-45, 45] degrees per image."""
    radius, sigma = [(10, 1.0), (10, 1.5), (10, 2.0), (10, 2.5), (12, 3.0)][s]
    radius, sigma = round(radius * _scale(x)), sigma * _scale(x)
    angles = (torch.rand(len(x), generator=generator, dtype=torch.float64) - 0.5) * (math.pi / 2)
    taps = torch.arange(radius + 1, dtype=torch.float64)
    weights = torch.exp(-(taps**2) / (2 * sigma**2))
    size = 2 * radius + 1
    kernels = torch.zeros(len(x), size * size, dtype=torch.float64)
    for i, angle in enumerate(angles.tolist()):  # bilinear splat of each tap into the kernel grid
        px, py = radius + taps * math.cos(angle), radius + taps * math.sin(angle)
        x0, y0 = px.floor(), py.floor()
        for dx in (0, 1):
            for dy in (0, 1):
                w = weights * (1 - (px - x0 - dx).abs()) * (1 - (py - y0 - dy).abs())
                xi, yi = (x0 + dx).clamp(0, size - 1).long(), (y0 + dy).clamp(0, size - 1).long()
                kernels[i].index_add_(0, yi * size + xi, w)
    kernels = kernels / kernels.sum(1, keepdim=True)
    return _per_channel_conv(x, kernels.view(len(x), size, size))


# ----------------------------------------------------------------------------- photometric


@CORRUPTIONS.register("contrast")
def contrast(x: torch.Tensor, s: int, generator: torch.Generator) -> torch.Tensor:
    """Pull every pixel towards its channel's mean: (x - m_c) * c + m_c (per-channel means, as CIFAR-10-C)."""
    c = [0.75, 0.5, 0.4, 0.3, 0.15][s]
    mean = x.mean(dim=(2, 3), keepdim=True)
    return (x - mean) * c + mean


@CORRUPTIONS.register("brightness")
def brightness(x: torch.Tensor, s: int, generator: torch.Generator) -> torch.Tensor:
    """Add c to the HSV value channel (for one channel: x + c), keeping hue and saturation."""
    c = [0.05, 0.1, 0.15, 0.2, 0.3][s]
    value = x.amax(dim=1, keepdim=True)
    new_value = (value + c).clamp(max=1.0)
    return torch.where(value > 0, x * new_value / value.clamp_min(1e-12), new_value.expand_as(x))


# ----------------------------------------------------------------------------- geometric / digital


@CORRUPTIONS.register("pixelate")
def pixelate(x: torch.Tensor, s: int, generator: torch.Generator) -> torch.Tensor:
    """Box-downsample to a fraction c of the side and box-upsample back (Pillow)."""
    from PIL import Image

    c = [0.95, 0.9, 0.85, 0.75, 0.65][s]
    side = x.shape[-1]
    small = (max(1, int(side * c)),) * 2
    return _map_pil(
        x, lambda image: image.resize(small, Image.Resampling.BOX).resize((side, side), Image.Resampling.BOX)
    )


@CORRUPTIONS.register("elastic")
def elastic(x: torch.Tensor, s: int, generator: torch.Generator) -> torch.Tensor:
    """Simard-style elastic warp: a smooth random displacement field (Gaussian-filtered uniform noise,
    std 10% of the side) with a root-mean-square amplitude of 2..6% of the side.

    Not CIFAR-10-C's algorithm (which adds a random affine warp and uses its own alpha/sigma table):
    accuracies under ``elastic`` are not comparable with CIFAR-10-C's elastic_transform column."""
    side = x.shape[-1]
    amplitude = [0.02, 0.03, 0.04, 0.05, 0.06][s] * side
    sigma = 0.1 * side
    noise = torch.rand((len(x), 2) + x.shape[-2:], generator=generator, dtype=torch.float64) * 2 - 1
    radius = min(math.ceil(3 * sigma), side - 1)
    field = _per_channel_conv(noise, _gaussian_kernel_2d(sigma, radius))
    field = field / field.pow(2).mean(dim=(1, 2, 3), keepdim=True).sqrt().clamp_min(1e-12) * amplitude
    h, w = x.shape[-2:]
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64), indexing="ij")
    grid_x = (xs + field[:, 0]) * (2.0 / max(w - 1, 1)) - 1
    grid_y = (ys + field[:, 1]) * (2.0 / max(h - 1, 1)) - 1
    grid = torch.stack([grid_x, grid_y], dim=-1).to(x)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=True)


@CORRUPTIONS.register("jpeg")
def jpeg(x: torch.Tensor, s: int, generator: torch.Generator) -> torch.Tensor:
    """JPEG compression (Pillow) at quality 80, 65, 58, 50, 40."""
    from PIL import Image

    quality = [80, 65, 58, 50, 40][s]

    def compress(image):
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=quality)
        buffer.seek(0)
        return Image.open(buffer).convert(image.mode)

    return _map_pil(x, compress)


def _map_pil(x: torch.Tensor, fn: Callable) -> torch.Tensor:
    """Apply ``fn`` (PIL image -> PIL image of the same size and mode) to every image of a [0, 1] batch."""
    from PIL import Image

    arrays = (x * 255.0).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
    out = []
    for arr in arrays:
        image = fn(Image.fromarray(arr[..., 0] if arr.shape[-1] == 1 else arr))
        out.append(np.asarray(image, dtype=np.uint8).reshape(arr.shape))
    return torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2).to(x.device).float() / 255.0
