"""Shared by the benchmark scripts: one optimiser step of a method outside Lightning."""

from __future__ import annotations

from typing import Any

import torch


def optimiser_step(
    model,
    optimizer: torch.optim.Optimizer,
    view1: torch.Tensor,
    view2: torch.Tensor,
    batch: Any = None,
    steps_done: int = 1,
) -> None:
    """What Lightning's loop does per batch, minus logging: objective, backward, step, EMA/bank hooks
    (with the EMA momentum of optimiser step ``steps_done``; the step's cost does not depend on it)."""
    loss = model.step(view1, view2, batch).loss
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    model.after_optimizer_step(steps_done)
