"""Batched feature extraction from a frozen model over any dataset."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch.utils.data import DataLoader

from probcl.core.progress import progress
from probcl.data.sources import ImageSource
from probcl.errors import DatasetError


def concat_batches(per_batch: Iterable[dict[str, torch.Tensor]], what: str) -> dict[str, torch.Tensor]:
    """The per-batch outputs ``{name: (B, ...) tensor}`` of a pass over a dataset, concatenated per name: the one
    feature-collection loop of probcl (features, scores, labels). DatasetError when no batch had an image."""
    parts: dict[str, list[torch.Tensor]] = {}
    for batch in per_batch:
        for name, value in batch.items():
            parts.setdefault(name, []).append(value)
    if not parts:
        raise DatasetError(f"{what}: no readable images")
    return {name: torch.cat(values) for name, values in parts.items()}


@torch.no_grad()
def extract(
    fn: Callable[[torch.Tensor], torch.Tensor],
    dataset: ImageSource,
    batch_size: int = 512,
    device: torch.device | str = "cpu",
    description: str | None = None,
    num_workers: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply ``fn`` (uint8 images -> (B, d) tensor) to every item; returns (outputs on CPU, labels)."""
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers)
    batches = progress(loader, description or f"features of {dataset.name}")
    out = concat_batches(
        ({"outputs": fn(images.to(device)).float().cpu(), "labels": torch.as_tensor(y)} for images, y, _ in batches),
        dataset.name,
    )
    return out["outputs"], out["labels"]


def pixel_features(images: torch.Tensor) -> torch.Tensor:
    """Raw pixels as features (the floor any representation must beat)."""
    return images.flatten(1).float() / 255.0
