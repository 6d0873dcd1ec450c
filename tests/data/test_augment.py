"""Views: per-sample randomness, shape/dtype, value range, determinism under a seed."""

import torch

from probcl.config import AugmentConfig
from probcl.data.augment import Normalizer, ViewGenerator, resolve_view_params


def make_generator(preset: str, channels: int = 1, size: int = 28) -> ViewGenerator:
    params = resolve_view_params(AugmentConfig(preset=preset))
    return ViewGenerator(params, size, channels, Normalizer([0.0] * channels, [1.0] * channels))


def test_views_differ_per_sample_and_keep_shape_and_range():
    torch.manual_seed(0)
    x = torch.full((16, 1, 28, 28), 0, dtype=torch.uint8)
    x[:, :, 7:21, 7:21] = 200  # the same image repeated: any difference comes from the augmentation
    gen = make_generator("small")
    v1, v2 = gen(x)
    assert v1.shape == v2.shape == (16, 1, 28, 28)
    assert v1.dtype == torch.float32
    assert v1.min() >= 0.0 and v1.max() <= 1.0  # identity normalizer: [0, 1] pixels
    assert not torch.allclose(v1, v2)
    distinct = {tuple(v1[i].flatten()[::37].tolist()) for i in range(16)}
    assert len(distinct) > 8  # parameters are drawn per sample, not once per batch


def test_colour_presets_on_rgb_and_asymmetric_byol():
    torch.manual_seed(0)
    x = torch.randint(0, 256, (8, 3, 32, 32), dtype=torch.uint8)
    for preset in ("simclr", "byol", "moco", "ebclr-color"):
        v1, v2 = make_generator(preset, channels=3, size=32)(x)
        assert v1.shape == (8, 3, 32, 32) and torch.isfinite(v1).all()
    byol = resolve_view_params(AugmentConfig(preset="byol"))
    assert byol.blur_prob == (1.0, 0.1) and byol.solarize_prob == (0.0, 0.2)


def test_overrides_and_seed_determinism():
    params = resolve_view_params(AugmentConfig(preset="small", crop_scale=(0.5, 1.0), jitter_strength=0.5))
    assert params.crop_scale == (0.5, 1.0) and params.jitter == (0.4, 0.4, 0.4, 0.1)
    x = torch.randint(0, 256, (4, 1, 28, 28), dtype=torch.uint8)
    gen = make_generator("small")
    torch.manual_seed(3)
    a = gen(x)
    torch.manual_seed(3)
    b = gen(x)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_none_preset_is_normalization_only():
    x = torch.randint(0, 256, (4, 1, 28, 28), dtype=torch.uint8)
    norm = Normalizer([0.5], [0.25])
    gen = ViewGenerator(resolve_view_params(AugmentConfig(preset="none")), 28, 1, norm)
    v1, v2 = gen(x)
    expected = (x.float() / 255 - 0.5) / 0.25
    assert torch.allclose(v1, expected) and torch.allclose(v2, expected)
    lo, hi = norm.bounds()
    assert torch.allclose(lo, torch.tensor(-2.0)) and torch.allclose(hi, torch.tensor(2.0))
