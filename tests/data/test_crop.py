"""The one-pass random resized crop + flip: each view is F.interpolate of its crop box (flipped where drawn),
and the boxes follow torchvision's RandomResizedCrop distribution."""

import math

import pytest
import torch
import torch.nn.functional as F
from torchvision.transforms import RandomResizedCrop

from probcl.data.crop import RandomResizedCropFlip


def test_whole_image_without_flip_is_the_identity_and_with_flip_the_mirror():
    x = torch.rand(6, 3, 20, 20)
    assert torch.allclose(RandomResizedCropFlip(20, (1.0, 1.0), flip=0.0)(x), x, atol=1e-6)
    assert torch.allclose(RandomResizedCropFlip(20, (1.0, 1.0), flip=1.0)(x), x.flip(-1), atol=1e-6)


@pytest.mark.parametrize("flip", [0.0, 1.0])
def test_each_view_is_its_box_resized_bilinearly(monkeypatch, flip):
    """Reference: slice the box out and resize it with F.interpolate (bilinear, align_corners=True: kornia's
    RandomResizedCrop default); a one-pixel-wide box repeats its pixel."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(3, 2, 28, 28, generator=g)
    boxes = torch.tensor(
        [[0.0, 0.0, 28.0, 28.0], [5.0, 3.0, 17.0, 21.0], [11.0, 9.0, 13.0, 19.0], [27.0, 2.0, 1.0, 9.0]]
    )
    x = torch.cat([x, x[:1]])
    crop = RandomResizedCropFlip(24, (0.2, 1.0), flip=flip)
    monkeypatch.setattr(crop, "boxes", lambda *args: boxes)
    views = crop(x)
    for i, (left, top, w, h) in enumerate(boxes.int().tolist()):
        box = x[i : i + 1, :, top : top + h, left : left + w]
        expected = F.interpolate(box, size=(24, 24), mode="bilinear", align_corners=True)[0]
        assert torch.allclose(views[i], expected.flip(-1) if flip else expected, atol=1e-5)


def test_boxes_follow_torchvisions_distribution():
    """Every box fits in the image with an area fraction in scale (up to integer rounding); area, aspect and
    position statistics match torchvision's RandomResizedCrop.get_params over 20,000 draws each."""
    torch.manual_seed(1)
    height, width, scale, ratio = 28, 28, (0.3, 1.0), (3 / 4, 4 / 3)
    ours = RandomResizedCropFlip(28, scale, ratio).boxes(20000, height, width, torch.device("cpu"))
    image = torch.zeros(1, height, width)
    theirs = torch.tensor(
        [RandomResizedCrop.get_params(image, list(scale), list(ratio)) for _ in range(20000)], dtype=torch.float32
    )[:, [1, 0, 3, 2]]  # (top, left, h, w) -> (left, top, w, h)
    left, top, w, h = ours.unbind(1)
    assert (left >= 0).all() and (top >= 0).all() and (left + w <= width).all() and (top + h <= height).all()
    assert (left == left.round()).all() and (w == w.round()).all()
    fraction = w * h / (height * width)
    assert fraction.min() > scale[0] * 0.8 and fraction.max() <= 1.0

    def stats(b: torch.Tensor) -> torch.Tensor:
        left, top, w, h = b.unbind(1)
        return torch.stack([(w * h).mean() / 784, (w / h).log().mean(), (w / h).log().std(), left.mean(), top.mean()])

    assert torch.allclose(stats(ours), stats(theirs), atol=0.02, rtol=0.03)
    assert left.max() == width - w[left.argmax()]  # positions reach the far edge


def test_flip_probability_and_per_sample_draws():
    torch.manual_seed(2)
    x = torch.arange(8.0).repeat(4000, 1, 8, 1)  # a horizontal ramp: flipped rows decrease
    views = RandomResizedCropFlip(8, (1.0, 1.0), flip=0.3)(x)
    flipped = (views[:, 0, 0, 0] > views[:, 0, 0, -1]).float().mean().item()
    assert abs(flipped - 0.3) < 4 * math.sqrt(0.3 * 0.7 / 4000)
