"""The training progress bar: Lightning's rich bar, labelled with the epoch in progress counted from 1."""

from __future__ import annotations

from lightning.pytorch.callbacks import RichProgressBar


class EpochProgressBar(RichProgressBar):
    """Lightning's :class:`RichProgressBar` says ``Epoch 1/1`` during the second of two epochs (its 0-based epoch
    index over the last index); this one says ``epoch 2 of 2``."""

    def _get_train_description(self, current_epoch: int) -> str:
        description = f"epoch {current_epoch + 1}"
        if self.trainer.max_epochs is not None and self.trainer.max_epochs > 0:
            description += f" of {self.trainer.max_epochs}"
        # as Lightning pads it: the same width as the validation bar's label, so the line does not flicker
        return f"{description:{len(self.validation_description)}}"
