"""What the suites feed a model: seeded test subsets, extra image sets through the probe, list options."""
from __future__ import annotations

from typing import Any, Optional

import torch

from probcl.data.datasets import TensorImages, random_subset
from probcl.eval.features import extract
from probcl.eval.suites import EvalContext


def as_list(value: Any) -> list:
    """A suite option given once (``digits``) or as a list (``[digits, mnist]`` / ``digits,mnist``)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [v for v in value.split(",") if v]
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def subset_indices(n: int, max_images: Optional[int], seed: int) -> torch.Tensor:
    """All indices, or a seeded sorted subset of ``max_images`` of them."""
    if max_images is None or max_images >= n:
        return torch.arange(n)
    if max_images < 1:
        raise ValueError(f"max_images must be >= 1, got {max_images}")
    return random_subset(n, max_images, seed)


def id_test_images(ctx: EvalContext, max_images: Optional[int], seed: int) -> tuple[TensorImages, torch.Tensor]:
    """The in-distribution test set (or a seeded subset of it) and the indices taken."""
    data = ctx.dataset(None, "test")
    if not isinstance(data, TensorImages):
        raise ValueError(f"{data.name} is streamed from files; this suite needs an in-memory dataset")
    idx = subset_indices(len(data), max_images, seed)
    return (data if len(idx) == len(data) else data.subset(idx)), idx


def embed(ctx: EvalContext, data, description: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Uncached (features, labels) of any dataset with the context's feature layer."""
    return extract(ctx.embed_fn(), data, ctx.batch_size, ctx.torch_device, description)


def probe_logits(ctx: EvalContext, data, description: str) -> torch.Tensor:
    """Logits of the context's offline linear probe on any dataset."""
    _, probe = ctx.linear_probe()
    return probe.logits(embed(ctx, data, description)[0])
