"""Batched feature extraction from a frozen model over any dataset."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.data import DataLoader

from probcl.core.progress import progress
from probcl.data.sources import ImageSource


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
    outputs, labels = [], []
    for images, y, _ in progress(loader, description or f"features of {dataset.name}"):
        outputs.append(fn(images.to(device)).float().cpu())
        labels.append(torch.as_tensor(y))
    return torch.cat(outputs), torch.cat(labels)


def pixel_features(images: torch.Tensor) -> torch.Tensor:
    """Raw pixels as features (the floor any representation must beat)."""
    return images.flatten(1).float() / 255.0
