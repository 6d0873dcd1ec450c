"""The device-side colour, grayscale, blur, solarize and noise steps (probcl/data/intensity.py) against kornia.

Each op, with its random parameters forced, equals kornia's functions and augmentation modules given the same
parameters; the parameters it draws follow the distributions kornia draws, as probcl configures it (scipy's
tests, fixed seeds, so the outcome is deterministic); ``augment.backend: auto`` on a CPU makes exactly the views
kornia made before there were backends.
"""

from __future__ import annotations

import itertools
import math
import random

import kornia.augmentation as K
import pytest
import torch
from kornia import color, enhance, filters
from scipy import stats
from torch.utils._python_dispatch import TorchDispatchMode

from probcl.config import AugmentConfig
from probcl.data import intensity
from probcl.data.augment import Normalizer, ViewGenerator, resolve_backend, resolve_view_params
from probcl.data.crop import RandomResizedCropFlip

TOL = 1e-5
ALPHA = 1e-3  # a seeded distribution test fails below this p-value


def rgb(batch: int = 24, size: int = 12, levels: int | None = None, seed: int = 0) -> torch.Tensor:
    """Random RGB images in [0, 1]; with ``levels``, quantised so that channels tie and pixels are gray or black."""
    generator = torch.Generator().manual_seed(seed)
    if levels is None:
        return torch.rand(batch, 3, size, size, generator=generator)
    return torch.randint(0, levels, (batch, 3, size, size), generator=generator) / (levels - 1)


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and float((a - b).abs().max()) <= TOL


# ------------------------------------------------------------------ the formulas, against kornia's functions
@pytest.mark.parametrize("levels", [None, 4])
def test_colour_steps_equal_kornias_functions(levels):
    x = rgb(levels=levels)
    factor = torch.linspace(0.0, 1.8, len(x))
    assert close(intensity.brightness(x, factor), enhance.adjust_brightness_accumulative(x, factor))
    assert close(intensity.contrast(x, factor), enhance.adjust_contrast_with_mean_subtraction(x, factor))
    gray = x[:, :1]  # one channel: the contrast blends with the image's mean, saturation leaves it
    assert close(intensity.contrast(gray, factor), enhance.adjust_contrast_with_mean_subtraction(gray, factor))
    assert close(intensity.saturation(x, factor), enhance.adjust_saturation_with_gray_subtraction(x, factor))
    assert torch.equal(intensity.saturation(gray, factor), gray)
    shift = torch.linspace(-0.5, 0.5, len(x))  # turns; kornia's adjust_hue takes radians
    assert close(intensity.hue(x, shift), enhance.adjust_hue(x, 2 * math.pi * shift))
    assert close(intensity.luma(x), color.rgb_to_grayscale(x))
    assert close(intensity.solarize(x), enhance.solarize(x, 0.5, 0.0))


def test_a_wrong_formula_is_caught():
    """The tolerance resolves a change a jitter could plausibly get wrong (the hue in radians, not turns)."""
    x, shift = rgb(), torch.full((24,), 0.05)
    assert not close(intensity.hue(x, shift), enhance.adjust_hue(x, shift))


@pytest.mark.parametrize("kernel", [3, 9])
def test_blur_equals_kornias_gaussian_blur2d(kernel):
    x = rgb(size=20)
    sigma = torch.linspace(0.1, 2.0, len(x))
    expected = filters.gaussian_blur2d(x, (kernel, kernel), sigma.view(-1, 1).expand(-1, 2), border_type="reflect")
    assert close(intensity.gaussian_blur(x, kernel, sigma), expected)


# ------------------------------------------------------------------ the modules, against kornia's, same parameters
@pytest.mark.parametrize("amplitudes", [(0.4, 0.4, 0.0, 0.0), (0.8, 0.8, 0.8, 0.2), (0.4, 0.4, 0.2, 0.1)])
def test_colour_jitter_equals_kornias_given_its_draw(amplitudes):
    x = rgb(batch=64, levels=5)
    random.seed(0)
    torch.manual_seed(0)
    jitter = intensity.ColourJitter(*amplitudes, p=0.8)
    for _ in range(4):  # four draws: four orders
        draw = jitter.sample(x)
        assert draw.applied is not None and 0 < int(draw.applied.sum()) < len(x)
        b, c, s, h = draw.factors
        params = {
            "brightness_factor": b,
            "contrast_factor": c,
            "saturation_factor": s,
            "hue_factor": h,
            "order": torch.tensor(draw.order),
            "batch_prob": draw.applied.float(),
        }
        expected = K.ColorJitter(*amplitudes, p=0.8)(x, params=params)
        assert close(jitter.transform(x, draw), expected)


def test_grayscale_blur_solarize_and_noise_equal_kornias_given_their_draws():
    x = rgb(batch=64)
    torch.manual_seed(1)
    gray = intensity.RandomGrayscale(0.2)
    applied = gray.sample(x)
    assert applied is not None
    assert close(gray.transform(x, applied), K.RandomGrayscale(p=0.2)(x, params={"batch_prob": applied.float()}))

    blur = intensity.RandomGaussianBlur(3, (0.1, 2.0), 0.5)
    draw = blur.sample(x)
    assert draw.applied is not None
    kornia_blur = K.RandomGaussianBlur((3, 3), (0.1, 2.0), p=0.5)
    expected = kornia_blur(x, params={"sigma": draw.sigma, "batch_prob": draw.applied.float()})
    assert close(blur.transform(x, draw), expected)

    solar = intensity.RandomSolarize(0.2)
    applied = solar.sample(x)
    assert applied is not None
    # probcl's kornia setting draws the threshold 0.5 and the addition 0 for every sample
    kornia_solar = K.RandomSolarize(thresholds=0.0, additions=0.0, p=0.2)
    drawn = kornia_solar.forward_parameters(x.shape)
    assert torch.equal(drawn["thresholds"], torch.full((64,), intensity.SOLARIZE_THRESHOLD))
    assert torch.equal(drawn["additions"], torch.zeros(64))
    expected = kornia_solar(x, params={**drawn, "batch_prob": applied.float()})
    assert close(solar.transform(x, applied), expected)

    noise = intensity.GaussianNoise(0.03)
    drawn_noise = noise.sample(x)
    kornia_noise = K.RandomGaussianNoise(std=0.03, p=1.0)
    assert close(noise.transform(x, drawn_noise), kornia_noise(x, params={"gaussian_noise": drawn_noise}))
    # probability 1: every sample, without a draw of which
    assert intensity.RandomGrayscale(1.0).sample(x) is None
    always = K.RandomGaussianBlur((3, 3), (0.1, 2.0), p=1.0)(x, params={"sigma": draw.sigma})
    assert close(blur.transform(x, intensity.BlurDraw(draw.sigma, None)), always)


# ------------------------------------------------------------------ the draws follow kornia's distributions
def test_jitter_factors_are_uniform_on_torchvisions_ranges_and_applied_with_p():
    torch.manual_seed(2)
    random.seed(2)
    jitter = intensity.ColourJitter(0.8, 0.8, 0.8, 0.2, p=0.8)
    x = torch.zeros(5000, 3, 1, 1)
    draw = jitter.sample(x)
    # torchvision's ranges: [max(0, 1 - a), 1 + a] for brightness, contrast, saturation; [-h, h] turns for hue
    for factors, (lo, hi) in zip(draw.factors, [(0.2, 1.8), (0.2, 1.8), (0.2, 1.8), (-0.2, 0.2)], strict=True):
        assert lo <= float(factors.min()) and float(factors.max()) <= hi
        assert stats.kstest(factors.numpy(), "uniform", args=(lo, hi - lo)).pvalue > ALPHA
    assert draw.applied is not None
    assert stats.binomtest(int(draw.applied.sum()), len(x), 0.8).pvalue > ALPHA
    # an amplitude above 1 floors the low end at 0, as torchvision's
    floored = intensity.ColourJitter(1.5, 0.0, 0.0, 0.0, p=1.0).sample(x).factors[0]
    assert stats.kstest(floored.numpy(), "uniform", args=(0.0, 2.5)).pvalue > ALPHA
    # a wrong range is rejected by the same test (the test has power)
    assert stats.kstest(draw.factors[0].numpy(), "uniform", args=(0.25, 1.5)).pvalue < ALPHA


def test_jitter_order_is_one_uniform_permutation_per_batch_of_the_steps_that_run():
    random.seed(3)
    full = intensity.ColourJitter(0.4, 0.4, 0.4, 0.1, p=0.8)
    x = torch.zeros(2, 3, 1, 1)
    orders = [full.sample(x).order for _ in range(4800)]
    perms = list(itertools.permutations(range(4)))
    counts = [orders.count(p) for p in perms]
    assert sum(counts) == len(orders)  # every draw is a permutation of all four steps
    assert stats.chisquare(counts).pvalue > ALPHA
    # steps of amplitude 0 do not run: brightness and contrast alone (the gray presets), both orders
    gray = intensity.ColourJitter(0.4, 0.4, 0.0, 0.0, p=0.8)
    gray_orders = [gray.sample(x).order for _ in range(2000)]
    assert set(gray_orders) == {(0, 1), (1, 0)}
    assert stats.binomtest(gray_orders.count((0, 1)), len(gray_orders), 0.5).pvalue > ALPHA


@pytest.mark.parametrize("op, p", [(intensity.RandomGrayscale(0.2), 0.2), (intensity.RandomSolarize(0.2), 0.2)])
def test_grayscale_and_solarize_apply_with_p(op, p):
    torch.manual_seed(4)
    applied = op.sample(torch.zeros(8000, 3, 1, 1))
    assert stats.binomtest(int(applied.sum()), len(applied), p).pvalue > ALPHA


def test_blur_sigma_is_uniform_and_applied_with_p_and_noise_is_normal():
    torch.manual_seed(5)
    draw = intensity.RandomGaussianBlur(3, (0.1, 2.0), 0.5).sample(torch.zeros(5000, 3, 4, 4))
    assert stats.kstest(draw.sigma.numpy(), "uniform", args=(0.1, 1.9)).pvalue > ALPHA
    assert draw.applied is not None
    assert stats.binomtest(int(draw.applied.sum()), len(draw.applied), 0.5).pvalue > ALPHA
    noise = intensity.GaussianNoise(0.03).sample(torch.zeros(20, 1, 10, 10)).flatten()
    assert stats.kstest(noise.numpy(), "norm", args=(0.0, 0.03)).pvalue > ALPHA


def test_only_the_applied_samples_change():
    torch.manual_seed(6)
    x = rgb(batch=64)
    blur = intensity.RandomGaussianBlur(3, (0.5, 2.0), 0.5)
    draw = blur.sample(x)
    assert draw.applied is not None
    out = blur.transform(x, draw)
    changed = (out - x).flatten(1).abs().amax(1) > 0
    assert torch.equal(changed, draw.applied)


# ------------------------------------------------------------------ the backends in the views
def generator(preset: str, backend: str, channels: int = 3, size: int = 32, **overrides) -> ViewGenerator:
    params = resolve_view_params(AugmentConfig(preset=preset, **overrides))
    return ViewGenerator(params, size, channels, Normalizer([0.0] * channels, [1.0] * channels), backend)


def test_auto_resolves_to_device_on_cuda_and_kornia_elsewhere():
    assert resolve_backend("auto", torch.device("cuda", 0)) == "device"
    assert resolve_backend("auto", torch.device("cpu")) == "kornia"
    assert resolve_backend("auto", torch.device("meta")) == "kornia"
    for backend in ("kornia", "device"):
        assert (
            resolve_backend(backend, torch.device("cpu")) == resolve_backend(backend, torch.device("cuda")) == backend
        )


@pytest.mark.parametrize("preset, channels", [("small", 1), ("simclr", 3), ("byol", 3), ("ebclr-color", 3)])
def test_auto_on_the_cpu_makes_the_kornia_views_of_before(preset, channels):
    """auto on a CPU = kornia, bit for bit, and kornia = the pipeline as it was written before backends."""
    x = torch.randint(0, 256, (16, channels, 32, 32), dtype=torch.uint8)
    p = resolve_view_params(AugmentConfig(preset=preset))
    b, c, s, h = p.jitter if channels == 3 else (*p.jitter[:2], 0.0, 0.0)
    before = []
    for view in (0, 1):
        ops = [RandomResizedCropFlip(32, p.crop_scale, flip=p.flip), K.ColorJitter(b, c, s, h, p=p.jitter_prob)]
        if channels == 3:
            ops.append(K.RandomGrayscale(p=p.grayscale_prob))
        if p.blur_prob[view] > 0:
            ops.append(K.RandomGaussianBlur((3, 3), p.blur_sigma, p=p.blur_prob[view]))
        if p.solarize_prob[view] > 0:
            ops.append(K.RandomSolarize(thresholds=0.0, additions=0.0, p=p.solarize_prob[view]))
        if p.noise_std > 0:
            ops.append(K.RandomGaussianNoise(std=p.noise_std, p=1.0))
        before.append(torch.nn.Sequential(*ops))
    views = {}
    for backend in ("auto", "kornia", "device"):
        torch.manual_seed(7)
        random.seed(7)
        views[backend] = generator(preset, backend, channels)(x)
    torch.manual_seed(7)
    unit = x.float() / 255
    old = (before[0](unit), before[1](unit))
    for which in (0, 1):
        assert torch.equal(views["auto"][which], views["kornia"][which])
        assert torch.equal(views["kornia"][which], old[which])
        assert not torch.equal(views["device"][which], views["kornia"][which])  # the device backend is its own


def test_the_backends_make_views_of_one_distribution():
    """Two-sample KS tests on whole views of one image (simclr: crop, jitter, grayscale, blur), kornia vs device,
    over 100 batches (the jitter's order is drawn once a batch): each view's mean brightness and its spread across
    channels (what saturation, hue and grayscale change). A jitter probability of 0.6 instead of 0.8 is told apart."""
    x = torch.randint(0, 256, (1, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(9))
    x = x.expand(40, -1, -1, -1)
    summary = {}
    for name, views in [
        ("kornia", generator("simclr", "kornia")),
        ("device", generator("simclr", "device")),
        ("p 0.6", generator("simclr", "device", jitter_prob=0.6)),
    ]:
        torch.manual_seed(9)
        random.seed(9)
        view = torch.cat([views.view(x, 0) for _ in range(100)])
        summary[name] = (view.mean((1, 2, 3)), (view.amax(1) - view.amin(1)).mean((1, 2)))
    for kornia, device, other in zip(summary["kornia"], summary["device"], summary["p 0.6"], strict=True):
        assert stats.ks_2samp(kornia.numpy(), device.numpy()).pvalue > ALPHA
        assert stats.ks_2samp(kornia.numpy(), other.numpy()).pvalue < ALPHA


class OpLog(TorchDispatchMode):
    """The aten operators a block of code runs."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


# on a GPU each of these waits for the device: a tensor made from host values (a blocking copy to the device), a
# value read back (item, tolist, bool), a shape that depends on the data
WAITS = ("aten.lift_fresh", "aten._local_scalar_dense", "aten.nonzero", "aten.masked_select")


@pytest.mark.parametrize("preset, channels", [("small", 1), ("simclr", 3), ("byol", 3), ("ebclr-color", 3)])
def test_device_views_copy_nothing_from_the_host_and_read_nothing(preset, channels):
    """What the read-counting test (tests/tasks/test_step_syncs.py) cannot see on a CPU: a tensor made from host
    values, e.g. ``torch.tensor([...], device=x.device)``, is a blocking copy on a GPU. Kornia's views do read."""
    x = torch.randint(0, 256, (8, channels, 32, 32), dtype=torch.uint8)
    waits = {}
    for backend in ("device", "kornia"):
        views = generator(preset, backend, channels)
        with OpLog() as log:
            views(x)
        waits[backend] = [op for op in log.ops if op.startswith(WAITS)]
    assert waits["device"] == []
    assert "aten._local_scalar_dense.default" in waits["kornia"]


def test_every_backend_has_the_state_dict_of_before():
    """kornia's RandomSolarize keeps its ranges in the state dict: the keys stay those of the kornia pipeline, so a
    checkpoint loads into a model of either backend."""
    keys = {backend: set(generator("byol", backend).state_dict()) for backend in ("auto", "kornia", "device")}
    assert (
        keys["auto"]
        == keys["kornia"]
        == keys["device"]
        == {
            "pipelines.1.4._param_generator.thresholds",
            "pipelines.1.4._param_generator.additions",
        }
    )
    generator("byol", "device").load_state_dict(generator("byol", "kornia").state_dict())


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="hue"):
        intensity.ColourJitter(0.4, 0.4, 0.4, 0.6, p=0.8)
    with pytest.raises(ValueError, match="odd"):
        intensity.RandomGaussianBlur(4, (0.1, 2.0), 0.5)
