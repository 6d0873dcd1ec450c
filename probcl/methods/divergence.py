"""Watching the training loss for non-finite values without reading it back from the device every step."""

from __future__ import annotations

import torch


class DivergenceWatch:
    """Remembers the first optimiser step whose loss was NaN or infinite, and that loss, in device tensors.

    :meth:`observe` runs every step and only queues two small device operations; :meth:`first_bad` reads the
    record back (one host-device synchronisation), which the training loop does at logging steps and before a
    checkpoint is written, so a GPU is never made to wait between them.
    """

    def __init__(self) -> None:
        self.step: torch.Tensor | None = None  # first bad step, -1 while every loss was finite
        self.value: torch.Tensor | None = None  # the loss at that step

    def observe(self, loss: torch.Tensor, step: int) -> None:
        """Record ``loss`` of optimiser step ``step`` if it is the first non-finite one."""
        loss = loss.detach().float()
        if self.step is None or self.value is None or self.step.device != loss.device:
            self.step = torch.full((), -1, dtype=torch.long, device=loss.device)
            self.value = torch.zeros((), device=loss.device)
        first = ~torch.isfinite(loss) & (self.step < 0)
        self.step = torch.where(first, torch.full_like(self.step, step), self.step)
        self.value = torch.where(first, loss, self.value)

    def first_bad(self) -> tuple[int, float] | None:
        """(step, loss) of the first non-finite loss observed, or None."""
        if self.step is None or self.value is None:
            return None
        step = int(self.step)
        return (step, float(self.value)) if step >= 0 else None
