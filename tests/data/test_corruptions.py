"""The corruption suite: shape/dtype/range, determinism, severity ordering, and a few exact formulas."""

from __future__ import annotations

import pytest
import torch

from probcl.data.corruptions import CORRUPTIONS, SEVERITIES, corrupt
from probcl.data.loaders import load_dataset

NAMES = CORRUPTIONS.names()


@pytest.fixture(scope="module")
def fashion():
    return load_dataset("fashion-mnist", "test").images[:48]


def test_all_corruptions_are_registered():
    assert set(NAMES) == {
        "gaussian_noise",
        "shot_noise",
        "impulse_noise",
        "defocus_blur",
        "motion_blur",
        "contrast",
        "brightness",
        "pixelate",
        "elastic",
        "jpeg",
    }


@pytest.mark.parametrize("name", NAMES)
def test_shape_dtype_range_and_determinism(name, fashion):
    rgb = torch.randint(0, 256, (5, 3, 20, 20), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    for images in (fashion, rgb):
        for severity in (1, 5):
            out = corrupt(images, name, severity, seed=7)
            assert out.shape == images.shape and out.dtype == torch.uint8 and out.device == images.device
            assert torch.equal(out, corrupt(images, name, severity, seed=7))
    assert not torch.equal(corrupt(fashion, name, 3), fashion)


@pytest.mark.parametrize("name", NAMES)
def test_severity_increases_distance_from_clean(name, fashion):
    distance = [(corrupt(fashion, name, s).float() - fashion.float()).abs().mean().item() for s in SEVERITIES]
    assert all(a < b for a, b in zip(distance, distance[1:])), distance


def test_random_corruptions_depend_on_the_seed(fashion):
    for name in ("gaussian_noise", "shot_noise", "impulse_noise", "motion_blur", "elastic"):
        assert not torch.equal(corrupt(fashion, name, 3, seed=0), corrupt(fashion, name, 3, seed=1))


def test_exact_photometric_formulas():
    x = torch.tensor([0, 50, 100, 250], dtype=torch.uint8).view(1, 1, 2, 2)
    mean = x.float().mean()
    # contrast severity 2: (x - mean) * 0.5 + mean
    assert corrupt(x, "contrast", 2).flatten().tolist() == ((x.float() - mean) * 0.5 + mean).round().flatten().tolist()
    # brightness severity 1 on one channel: x + 0.05 (in [0, 1] units), clipped
    assert (
        corrupt(x, "brightness", 1).flatten().tolist() == (x.float() + 12.75).clamp(max=255).round().flatten().tolist()
    )
    # impulse noise only ever writes 0 or 255
    big = torch.full((1, 1, 64, 64), 128, dtype=torch.uint8)
    out = corrupt(big, "impulse_noise", 5)
    changed = out[out != 128]
    assert len(changed) > 0 and set(changed.unique().tolist()) <= {0, 255}


def test_bad_arguments():
    x = torch.zeros(1, 1, 8, 8, dtype=torch.uint8)
    with pytest.raises(ValueError, match="severity"):
        corrupt(x, "contrast", 6)
    with pytest.raises(ValueError, match="uint8"):
        corrupt(x.float(), "contrast", 1)
    with pytest.raises(ValueError, match="unknown corruption"):
        corrupt(x, "fog", 1)


def test_contrast_pulls_each_channel_towards_its_own_mean():
    # Channel 0 constant 200/255, channel 1 a 0..255 ramp: per-channel means (as CIFAR-10-C's
    # np.mean(x, axis=(0, 1))) keep channel 0 at 200; an image-wide mean would pull it down.
    ramp = torch.linspace(0, 255, 16).round().to(torch.uint8).view(4, 4)
    images = torch.stack([torch.full((4, 4), 200, dtype=torch.uint8), ramp])[None]
    out = corrupt(images, "contrast", 3).float()
    assert torch.equal(out[0, 0], torch.full((4, 4), 200.0))
    x1 = ramp.double() / 255
    expected = ((x1 - x1.mean()) * 0.4 + x1.mean()) * 255
    assert torch.allclose(out[0, 1], expected.round().float())
