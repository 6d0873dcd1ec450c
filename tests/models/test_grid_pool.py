"""GridAvgPool2d (the small CNN's pooling, exportable to ONNX) against torch's adaptive average pooling."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from probcl.models.backbones import GridAvgPool2d, SmallCNN, pooling_bins


@pytest.mark.parametrize("image_size", [28, 32])  # FMNIST/MNIST/digits presets; CIFAR
@pytest.mark.parametrize("pool", [1, 2])
@pytest.mark.parametrize("channels_last", [False, True])
def test_equals_adaptive_avg_pool_on_the_presets_sizes(image_size, pool, channels_last):
    """The small CNN's last map (two stride-2 steps: 7x7 or 8x8) pooled to the presets' grids: the same bits as
    F.adaptive_avg_pool2d, so models trained with it give the same features."""
    torch.manual_seed(0)
    cnn = SmallCNN(1, 4, pool=pool).eval()
    with torch.no_grad():
        fmap = cnn.features(torch.randn(5, 1, image_size, image_size))
    assert fmap.shape[-1] == image_size // 4
    if channels_last:
        fmap = fmap.contiguous(memory_format=torch.channels_last)
    assert torch.equal(GridAvgPool2d(pool)(fmap), F.adaptive_avg_pool2d(fmap, pool))


@pytest.mark.parametrize(("size", "out"), [(11, 3), (7, 3), (5, 4), (2, 3)])
def test_uneven_bins_average_the_same_cells(size, out):
    """Bins of different sizes (11 -> 3: rows 0-3, 3-7, 7-10) are averaged slice by slice."""
    x = torch.randn(2, 3, size, size, dtype=torch.float64)
    torch.testing.assert_close(GridAvgPool2d(out)(x), F.adaptive_avg_pool2d(x, out), rtol=1e-12, atol=1e-12)


def test_bins_are_torchs_floor_and_ceil_rule():
    assert pooling_bins(7, 2) == [(0, 4), (3, 7)]  # overlapping: row 3 is in both
    assert pooling_bins(11, 3) == [(0, 4), (3, 8), (7, 11)]
    assert pooling_bins(8, 2) == [(0, 4), (4, 8)]
