"""Lightning's rich progress bar, reading the logged metrics back from the device only when they change, and
labelled with the epoch in progress counted from 1."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import RichProgressBar

from probcl.methods.base import log_interval

STEP_METRICS_SHOWN = ("train/loss",)  # per-step metrics the bar shows (besides those logged with prog_bar=True)


class LoggedStepProgressBar(RichProgressBar):
    """The rich bar whose metrics are refreshed at logging steps and epoch ends only.

    Lightning converts every metric logged with ``prog_bar=True`` to a Python number after every batch, a
    host-device synchronisation per step that stalls a GPU. probcl logs its training metrics every
    ``log_every_n_steps`` steps (:meth:`probcl.methods.base.SSLMethod.logs_this_step`) without ``prog_bar``;
    this bar reads :data:`STEP_METRICS_SHOWN` from them once per logging interval and shows the same numbers.
    The step count and rate still move every batch.
    """

    def __init__(self) -> None:
        super().__init__()
        self._shown: dict[str, Any] | None = None
        self._read_at_step = -1
        self._stale = True

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        every = log_interval(trainer)
        step = trainer.global_step
        if self._shown is None or self._stale or (every > 0 and step % every == 0 and step != self._read_at_step):
            shown = super().get_metrics(trainer, pl_module)
            logged = trainer.callback_metrics
            shown.update({name: float(logged[name]) for name in STEP_METRICS_SHOWN if name in logged})
            self._shown = shown
            self._read_at_step, self._stale = step, False
        return self._shown

    def _get_train_description(self, current_epoch: int) -> str:
        """``epoch 2 of 2`` during the second of two epochs (Lightning's bar says ``Epoch 1/1``: its 0-based epoch
        index over the last index)."""
        description = f"epoch {current_epoch + 1}"
        if self.trainer.max_epochs is not None and self.trainer.max_epochs > 0:
            description += f" of {self.trainer.max_epochs}"
        # as Lightning pads it: the same width as the validation bar's label, so the line does not flicker
        return f"{description:{len(self.validation_description)}}"

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._stale = True  # the epoch's monitor results were just logged
        super().on_train_epoch_end(trainer, pl_module)
