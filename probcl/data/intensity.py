"""Per-sample colour jitter, grayscale, Gaussian blur, solarisation and noise of a batch, with nothing read back
from its device: the ``device`` backend of ``augment.backend`` (:func:`probcl.data.augment.resolve_backend`).

kornia's versions read values back to the host on every call: ``ColorJitter`` turns its random order into a list
and checks each colour step's factors with a Python ``.any()`` (5 reads a view), ``RandomGaussianBlur`` checks
that its sigmas are positive (1 read); on a GPU each read waits until the device has run everything queued before
it. These modules draw the same distributions as kornia 0.9's ``ColorJitter``, ``RandomGrayscale``,
``RandomGaussianBlur``, ``RandomSolarize`` and ``RandomGaussianNoise`` with probcl's settings, and compute the same
formulas (torchvision's colour jitter, as ``kornia.augmentation.ColorJitter`` does), but every random number is
drawn on the batch's device and every sample's "applied or not" is a ``torch.where`` there; no tensor is made from
host values either (on a GPU that is a blocking copy, which waits for the queue too). The one host-side choice,
the order of the colour steps (one permutation per batch, as kornia draws it), comes from Python's ``random``
module, which :mod:`probcl.runs.resume` re-seeds before every step.

Each module splits into ``sample`` (its random parameters for a batch) and ``transform`` (the transform with given
parameters), so that a test can force the parameters and compare with kornia's functions; ``forward`` is the
two. Images are float (B, C, H, W) in [0, 1].
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

LUMA = (0.299, 0.587, 0.114)  # ITU-R 601-2 luma of R, G, B: kornia's rgb_to_grayscale, torchvision's, PIL's
SOLARIZE_THRESHOLD = 0.5  # RandomSolarize(thresholds=0, additions=0): pixels at or above it are inverted


def _per_sample(values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """(B,) values shaped to broadcast over (B, C, H, W) images."""
    return values.to(x.dtype).view(-1, 1, 1, 1)


def _select(applied: torch.Tensor | None, transformed: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``transformed`` where a sample is ``applied``, ``x`` elsewhere; ``None``: every sample is."""
    return transformed if applied is None else torch.where(applied.view(-1, 1, 1, 1), transformed, x)


def _applied(p: float, batch: int, device: torch.device) -> torch.Tensor | None:
    """Which samples an op of probability ``p`` transforms, drawn per sample (None: all, for ``p >= 1``)."""
    return None if p >= 1 else torch.rand(batch, device=device) < p


def luma(x: torch.Tensor) -> torch.Tensor:
    """(B, 3, H, W) RGB -> (B, 1, H, W) gray, weighted by :data:`LUMA`."""
    r, g, b = x.unbind(1)
    return (r * LUMA[0] + g * LUMA[1] + b * LUMA[2]).unsqueeze(1)


def brightness(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Each image times its factor, clamped to [0, 1] (torchvision's ``adjust_brightness``)."""
    return (x * _per_sample(factor, x)).clamp(0.0, 1.0)


def contrast(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Each image blended with its mean gray level (the luma's mean for RGB), clamped to [0, 1]."""
    mean = luma(x).mean((-2, -1), keepdim=True) if x.shape[1] == 3 else x.mean((-3, -2, -1), keepdim=True)
    f = _per_sample(factor, x)
    return (x * f + mean * (1 - f)).clamp(0.0, 1.0)


def saturation(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Each RGB image blended with its gray version, clamped to [0, 1]; a gray image is returned as it is."""
    if x.shape[1] == 1:
        return x
    f = _per_sample(factor, x)
    return ((1 - f) * luma(x) + f * x).clamp(0.0, 1.0)


def hue(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Each RGB image's hue turned by its ``shift`` in turns of the hue circle (0.5: the opposite colours):
    RGB -> HSV, hue + shift, -> RGB, as kornia's ``adjust_hue(x, 2 pi shift)``. Value and saturation stay."""
    high, low = x.amax(1, keepdim=True), x.amin(1, keepdim=True)
    spread = high - low
    r, g, b = x.unbind(1)
    r, g, b = r.unsqueeze(1), g.unsqueeze(1), b.unsqueeze(1)
    divisor = torch.where(spread == 0, torch.ones_like(spread), spread)
    # the hue in sixths of the circle, from the first maximal channel (torch.max's tie-breaking, as kornia)
    sixths = torch.where(
        (r >= g) & (r >= b), (g - b) / divisor, torch.where(g >= b, 2 + (b - r) / divisor, 4 + (r - g) / divisor)
    )
    turned = sixths + 6 * _per_sample(shift, x)
    # HSV -> RGB: channel n (R 5, G 3, B 1) is v - v s clamp(min(k, 4 - k), 0, 1) with k = (n + 6 h) mod 6,
    # and v s = max - min
    n = torch.arange(5, 0, -2, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)  # 5, 3, 1: made on the device
    k = torch.remainder(n + turned, 6)
    return high - spread * torch.minimum(k, 4 - k).clamp(0.0, 1.0)


COLOUR_STEPS = (brightness, contrast, saturation, hue)  # in the order of ColourJitter's factors


@dataclass(frozen=True)
class JitterDraw:
    """The random parameters of one colour jitter of a batch."""

    factors: torch.Tensor  # (4, B): brightness, contrast, saturation factors and the hue shift (turns)
    order: tuple[int, ...]  # the steps that run (indices into COLOUR_STEPS), in the order they run
    applied: torch.Tensor | None  # (B,) bool: the samples jittered (None: all)


class ColourJitter(nn.Module):
    """torchvision's colour jitter, as ``kornia.augmentation.ColorJitter(brightness, contrast, saturation, hue,
    p=p)`` draws and applies it: per sample, with probability ``p``, brightness, contrast and saturation factors
    uniform in [max(0, 1 - a), 1 + a] for an amplitude a, and a hue shift uniform in [-hue, hue] turns, applied
    in one random order per batch, the image clamped to [0, 1] before, after and inside every step but the hue's.
    A step whose range is its identity alone (a 0 amplitude) is left out, as kornia skips it."""

    def __init__(self, brightness: float, contrast: float, saturation: float, hue: float, p: float) -> None:
        super().__init__()
        if not 0 <= hue <= 0.5:
            raise ValueError(f"the hue jitter is a share of the hue circle in [0, 0.5], got {hue}")
        if min(brightness, contrast, saturation) < 0:
            raise ValueError(f"jitter amplitudes must be >= 0, got {(brightness, contrast, saturation)}")
        self.ranges = tuple((max(0.0, 1 - a), 1 + a) for a in (brightness, contrast, saturation)) + ((-hue, hue),)
        self.steps = tuple(i for i, (lo, hi) in enumerate(self.ranges) if lo != hi)
        self.p = p

    def sample(self, x: torch.Tensor) -> JitterDraw:
        """Factors for every sample of ``x`` (drawn on its device), the order of the steps (on the host, one
        uniform permutation per batch) and the samples jittered."""
        factors = torch.empty(4, x.shape[0], device=x.device)
        for row, (lo, hi) in zip(factors, self.ranges, strict=True):
            row.uniform_(lo, hi)  # bounds as Python numbers: a tensor made from them would be a blocking copy
        order = tuple(random.sample(self.steps, len(self.steps)))
        return JitterDraw(factors, order, _applied(self.p, x.shape[0], x.device))

    def transform(self, x: torch.Tensor, draw: JitterDraw) -> torch.Tensor:
        """``x`` jittered as ``draw`` says."""
        out = x.clamp(0.0, 1.0)
        for step in draw.order:
            out = COLOUR_STEPS[step](out, draw.factors[step])
        return _select(draw.applied, out.clamp(0.0, 1.0), x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.transform(x, self.sample(x))


class _RandomApply(nn.Module):
    """With probability ``p`` per sample, the image function :meth:`image_op` (subclasses name it)."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def image_op(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def sample(self, x: torch.Tensor) -> torch.Tensor | None:
        """The samples transformed (None: all)."""
        return _applied(self.p, x.shape[0], x.device)

    def transform(self, x: torch.Tensor, applied: torch.Tensor | None) -> torch.Tensor:
        """``x`` with the ``applied`` samples transformed."""
        return _select(applied, self.image_op(x), x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.transform(x, self.sample(x))


class RandomGrayscale(_RandomApply):
    """Each RGB image replaced by its luma in all three channels with probability ``p`` (kornia's
    ``RandomGrayscale``; not clamped)."""

    def image_op(self, x: torch.Tensor) -> torch.Tensor:
        return luma(x).expand_as(x)


@dataclass(frozen=True)
class BlurDraw:
    """The random parameters of one Gaussian blur of a batch."""

    sigma: torch.Tensor  # (B,) the standard deviation of each sample's kernel, in pixels
    applied: torch.Tensor | None  # (B,) bool: the samples blurred (None: all)


def gaussian_blur(x: torch.Tensor, kernel: int, sigma: torch.Tensor) -> torch.Tensor:
    """Each image convolved with its own ``kernel`` x ``kernel`` Gaussian of standard deviation ``sigma`` (B,):
    taps exp(-t^2 / 2 sigma^2) at integer offsets t, normalised to sum 1, applied along the rows, then along the
    columns, on the image reflected at its borders (kornia's ``gaussian_blur2d``, border "reflect", separable)."""
    batch, channels, height, width = x.shape
    radius = kernel // 2
    offsets = torch.arange(kernel, device=x.device, dtype=x.dtype) - radius
    taps = torch.exp(-(offsets**2) / (2 * sigma.to(x.dtype).view(-1, 1) ** 2))
    taps = (taps / taps.sum(1, keepdim=True)).unsqueeze(1).expand(batch, channels, kernel).reshape(-1, kernel)
    padded = F.pad(x, (radius, radius, radius, radius), mode="reflect")
    planes = padded.reshape(1, batch * channels, height + 2 * radius, width + 2 * radius)
    rows = F.conv2d(planes, taps.view(-1, 1, 1, kernel), groups=batch * channels)
    return F.conv2d(rows, taps.view(-1, 1, kernel, 1), groups=batch * channels).view(batch, channels, height, width)


class RandomGaussianBlur(nn.Module):
    """kornia's ``RandomGaussianBlur((kernel, kernel), sigma, p=p)``: with probability ``p`` per sample, a
    Gaussian blur of standard deviation uniform in ``sigma`` (one draw per sample); not clamped."""

    def __init__(self, kernel: int, sigma: tuple[float, float], p: float) -> None:
        super().__init__()
        if kernel < 1 or kernel % 2 == 0:
            raise ValueError(f"the blur kernel must be a positive odd size, got {kernel}")
        if not 0 < sigma[0] <= sigma[1]:
            raise ValueError(f"the blur's sigma range must satisfy 0 < low <= high, got {sigma}")
        self.kernel, self.sigma, self.p = kernel, sigma, p

    def sample(self, x: torch.Tensor) -> BlurDraw:
        """Each sample's sigma and whether it is blurred, drawn on the batch's device."""
        sigma = torch.empty(x.shape[0], device=x.device).uniform_(*self.sigma)
        return BlurDraw(sigma, _applied(self.p, x.shape[0], x.device))

    def transform(self, x: torch.Tensor, draw: BlurDraw) -> torch.Tensor:
        """``x`` blurred as ``draw`` says."""
        return _select(draw.applied, gaussian_blur(x, self.kernel, draw.sigma), x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.transform(x, self.sample(x))


def solarize(x: torch.Tensor) -> torch.Tensor:
    """The image clamped to [0, 1], every pixel at or above :data:`SOLARIZE_THRESHOLD` inverted (1 - value)."""
    x = x.clamp(0.0, 1.0)
    return torch.where(x < SOLARIZE_THRESHOLD, x, 1 - x)


class RandomSolarize(_RandomApply):
    """kornia's ``RandomSolarize(thresholds=0, additions=0, p=p)`` (probcl's only setting): with probability
    ``p`` per sample, :func:`solarize`."""

    def image_op(self, x: torch.Tensor) -> torch.Tensor:
        return solarize(x)


class GaussianNoise(nn.Module):
    """Gaussian pixel noise of standard deviation ``std`` added to every pixel of every sample (kornia's
    ``RandomGaussianNoise(std=std, p=1)``; not clamped)."""

    def __init__(self, std: float) -> None:
        super().__init__()
        self.std = std

    def sample(self, x: torch.Tensor) -> torch.Tensor:
        """The noise, shaped like ``x``, drawn on its device."""
        return torch.randn_like(x) * self.std

    def transform(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """``x`` plus ``noise``."""
        return x + noise

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.transform(x, self.sample(x))
