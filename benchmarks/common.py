"""Shared by the benchmark scripts: one optimiser step of a method outside Lightning."""
from __future__ import annotations

from typing import Any

import torch


def optimiser_step(model, optimizer: torch.optim.Optimizer, view1: torch.Tensor, view2: torch.Tensor,
                   batch: Any = None) -> None:
    """What Lightning's loop does per batch, minus logging: objective, backward, step, EMA/bank hooks."""
    loss = model.step(view1, view2, batch).loss
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    model.after_optimizer_step()
