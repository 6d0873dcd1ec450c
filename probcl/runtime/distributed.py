"""Helpers for multi-process training: rank/world queries and all-gather with gradient."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class _GatherWithGrad(torch.autograd.Function):
    """all_gather forward; backward: the sum over ranks of the gradient every rank's loss sends to the gathered
    tensor, sliced to this rank's rows (what ``torch.distributed.nn.functional.all_gather``, deprecated, did)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        parts = [torch.empty_like(x) for _ in range(world_size())]
        dist.all_gather(parts, x.contiguous())
        ctx.rows = len(x)
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad[rank() * ctx.rows : (rank() + 1) * ctx.rows]


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """Concatenate ``x`` from all ranks along dim 0, keeping the autograd graph.

    The backward pass sums the gradient that every rank's loss sends to this rank's
    slice, so with DDP's gradient averaging the update equals that of one process
    holding the global batch.
    """
    if world_size() == 1:
        return x
    return _GatherWithGrad.apply(x)


def gather_batch(*xs: torch.Tensor, gather: bool = True) -> tuple[list[torch.Tensor], int]:
    """Each of ``xs`` (this rank's rows) concatenated over ranks with gradient (as given when ``gather`` is
    off), and the global index of this rank's first row: a contrastive loss's candidates and where its own
    anchors sit among them (rank r holds rows r*n .. r*n + n - 1; every rank has the same n)."""
    if not gather:
        return list(xs), 0
    return [gather_with_grad(x) for x in xs], rank() * len(xs[0])


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
