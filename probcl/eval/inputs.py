"""What the suites feed a model: the seeded in-memory test subset, and any image set through the probe."""

from __future__ import annotations

import torch

from probcl.data.datasets import ImageSource, TensorImages
from probcl.errors import ConfigError
from probcl.eval.context import ModelOnData


def id_test_images(ctx: ModelOnData, max_images: int | None, seed: int) -> tuple[TensorImages, torch.Tensor]:
    """The in-distribution test set (or a seeded subset of it) held in memory, and the indices taken."""
    data = ctx.dataset(None, "test")
    if not isinstance(data, TensorImages):
        raise ConfigError(
            f"{data.name} is streamed from files; this suite perturbs images in memory and needs "
            f"an in-memory dataset (a registered name, npz:PATH, or folder:PATH:stream=false)"
        )
    idx = data.seeded_indices(max_images, seed)
    return (data if len(idx) == len(data) else data.subset(idx)), idx


def calibration_halves(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted indices of the two halves of a seeded permutation of ``count`` ID test images: (calibration,
    held out). OOD scores fit their tails and thresholds on the first half and are evaluated on the second, so
    the ID acceptance they report is out of sample (the ``ood`` suite, ``benchmarks/ood_battery.py``)."""
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed))
    half = count // 2
    return order[:half].sort().values, order[half:].sort().values


def id_test_halves(
    ctx: ModelOnData, max_images: int | None, seed: int
) -> tuple[TensorImages, TensorImages, torch.Tensor]:
    """The in-memory ID test set cut by :func:`calibration_halves`, each half a seeded subset of at most
    ``max_images``: (calibration images, held-out images, the held-out images' indices in the test set)."""
    data, _ = id_test_images(ctx, None, seed)
    halves = []
    for idx in calibration_halves(len(data), seed):
        halves.append(idx[data.subset(idx).seeded_indices(max_images, seed)])
    calibration, held_out = halves
    return data.subset(calibration), data.subset(held_out), held_out


def probe_logits(ctx: ModelOnData, data: ImageSource, description: str) -> torch.Tensor:
    """Logits of the context's offline linear probe on any dataset."""
    _, probe = ctx.linear_probe()
    return probe.logits(ctx.extract(data, description)[0])
