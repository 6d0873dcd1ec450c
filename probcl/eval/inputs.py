"""What the suites feed a model: the seeded in-memory test subset, and any image set through the probe."""

from __future__ import annotations

import torch

from probcl.data.sources import ImageSource, TensorImages
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


def probe_logits(ctx: ModelOnData, data: ImageSource, description: str) -> torch.Tensor:
    """Logits of the context's offline linear probe on any dataset."""
    _, probe = ctx.linear_probe()
    return probe.logits(ctx.extract(data, description)[0])
