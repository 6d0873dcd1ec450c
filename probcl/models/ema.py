"""Momentum (EMA) copies of networks, as used by MoCo, BYOL and C-BYOL target encoders."""

from __future__ import annotations

import copy
import math

import torch
from torch import nn


def momentum_copy(module: nn.Module) -> nn.Module:
    """A frozen deep copy of ``module`` (no gradients), to be updated by :func:`ema_update_`."""
    target = copy.deepcopy(module)
    for p in target.parameters():
        p.requires_grad_(False)
    return target


@torch.no_grad()
def ema_update_(target: nn.Module, online: nn.Module, momentum: float) -> None:
    """target <- momentum * target + (1 - momentum) * online, for parameters; buffers are copied."""
    for t, o in zip(target.parameters(), online.parameters()):
        t.mul_(momentum).add_(o.detach(), alpha=1.0 - momentum)
    for target_buffer, online_buffer in zip(target.buffers(), online.buffers()):
        target_buffer.copy_(online_buffer)


def cosine_momentum(base: float, step: int, total_steps: int) -> float:
    """BYOL's ramp tau_k = 1 - (1 - tau_base) (cos(pi k / K) + 1) / 2, from tau_base to 1."""
    progress = min(1.0, step / max(1, total_steps))
    return 1.0 - (1.0 - base) * (math.cos(math.pi * progress) + 1.0) / 2.0
