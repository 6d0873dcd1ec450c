"""Helpers for multi-process training: rank/world queries and all-gather with gradient."""

from __future__ import annotations

import torch
import torch.distributed as dist


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """Concatenate ``x`` from all ranks along dim 0, keeping the autograd graph.

    The backward pass sums the gradient that every rank's loss sends to this rank's
    slice, so with DDP's gradient averaging the update equals that of one process
    holding the global batch.
    """
    if world_size() == 1:
        return x
    import torch.distributed.nn.functional as dist_fn

    return torch.cat(dist_fn.all_gather(x), dim=0)


@torch.no_grad()
def gather_no_grad(x: torch.Tensor) -> torch.Tensor:
    """Concatenate ``x`` from all ranks along dim 0 (no gradient); identical on every rank."""
    if world_size() == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=0)


@torch.no_grad()
def broadcast_(x: torch.Tensor, src: int = 0) -> torch.Tensor:
    """Overwrite ``x`` in place with rank ``src``'s copy (no-op on one process)."""
    if world_size() > 1:
        dist.broadcast(x, src)
    return x
