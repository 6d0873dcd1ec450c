"""The training loader fetches whole batches: the same batches as torch's per-image DataLoader over the same order,
and the same again when the epoch's order is held on the training device (a GPU; the CPU stands in here)."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader

from probcl.data.sources import TensorImages
from probcl.runs.resume import ResumableLoader


def _images(n: int = 300, labels: bool = True) -> TensorImages:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, 1, 6, 6), dtype=torch.uint8, generator=g)
    return TensorImages(images, torch.randint(0, 10, (n,), generator=g) if labels else None, "random")


def _batches(loader) -> list[tuple[torch.Tensor, ...]]:
    return [tuple(part) for part in loader]


def test_whole_batches_equal_torchs_per_image_loader_over_the_same_order():
    data = _images()
    loader = ResumableLoader(data, 32, seed=5)
    loader.order.set_epoch(3)
    order = loader.order.remaining()  # what the epoch visits, in order
    loader.order.set_epoch(4)
    loader.order.set_epoch(3)
    reference = DataLoader(data, batch_size=32, sampler=order.tolist(), drop_last=True)
    ours = _batches(loader)
    assert len(ours) == len(data) // 32 == len(loader)
    for mine, theirs in zip(ours, reference, strict=True):
        assert all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(mine, theirs))


def test_an_order_held_on_the_device_gives_the_same_batches_also_when_resumed_mid_epoch():
    for labels in (True, False):
        data = _images(labels=labels)
        on_host, on_device = ResumableLoader(data, 32, seed=1), ResumableLoader(data, 32, seed=1)
        on_device.batch_order.device = torch.device("cpu")  # stands in for the GPU that hold_on sets
        for loader in (on_host, on_device):
            loader.load_state_dict({"epoch": 2, "batches": 3})  # resumed after 3 batches of epoch 2
        host, device = _batches(on_host), _batches(on_device)
        assert len(host) == len(device) == len(data) // 32 - 3
        for a, b in zip(host, device, strict=True):
            assert all(torch.equal(x, y) for x, y in zip(a, b))
        if not labels:
            assert all((batch[1] == -1).all() for batch in host)
