"""Watching the training loss for non-finite values without reading it back from the device every step, and
the error a diverged run stops with."""

from __future__ import annotations

from pathlib import Path

import torch

from probcl.core.layout import RunPaths
from probcl.errors import TrainingDivergedError


def diverged(run_dir: str | Path, what: str, fix: str) -> TrainingDivergedError:
    """The error for a run whose training diverged: ``what`` happened, the likely ``fix``, and where the run's last
    good state is (its checkpoint folder, or that it diverged before its first checkpoint)."""
    last = RunPaths(Path(run_dir)).last
    if last.exists():
        kept = f"The last good checkpoint is kept in {last.parent}/."
    else:
        kept = "It diverged before its first checkpoint, so there is nothing to resume: start it again with the fix."
    return TrainingDivergedError(f"{what}. Likely fix: {fix}. {kept}")


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
