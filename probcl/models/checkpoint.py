"""A probcl checkpoint read without building its method, and the features its method computes.

Building a method means importing PyTorch Lightning (its base class), which costs more start-up than an evaluation
of kNN and the linear probe on Fashion-MNIST features saves elsewhere (about 3.3 s of a ~35 s `probcl evaluate`
on 2 CPU cores). What a run's *features* need is smaller: the config and data statistics in the checkpoint's
hyper-parameters and its ``backbone.*`` weights. Every method embeds images the same way (``SSLMethod.embed_batch``
is not overridden; the base class refuses a subclass that tries), so :class:`RunBackbone` computes exactly the
features the loaded method would: the same backbone module, weights, normalisation and memory format, through the
same function, :func:`~probcl.models.backbones.backbone_features`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch import nn

from probcl.config import Config, from_dict
from probcl.core.io import torch_load_problem
from probcl.core.layout import find_checkpoint
from probcl.data.augment import Normalizer
from probcl.data.info import DataInfo
from probcl.errors import ConfigError, RunError
from probcl.models.backbones import backbone_features, build_backbone, memory_format_for
from probcl.models.inference import Inference

BACKBONE_PREFIX = "backbone."  # every method keeps its backbone at ``self.backbone``


def epochs_completed(checkpoint: dict) -> int | None:
    """The epochs whose every training batch ran before ``checkpoint`` was written: Lightning's fit-loop count of
    processed epochs (its ``epoch`` is the 0-based epoch in progress, 65 in a 66-epoch run's last checkpoint);
    None for a checkpoint without loop state."""
    try:
        return int(checkpoint["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"])
    except (KeyError, TypeError):
        return None


@dataclass(frozen=True)
class RunCheckpoint:
    """What a probcl checkpoint holds: its hyper-parameters (config and data statistics as saved), weights, and
    where training stood (:attr:`meta`, which every evaluation result records)."""

    path: Path
    hyper_parameters: dict[str, Any]  # {"config": Config as a dict, "data_info": DataInfo as a dict}
    state_dict: dict[str, torch.Tensor]
    meta: dict[str, Any]  # path, epoch, epochs_completed, global_step

    @cached_property
    def config(self) -> Config:
        """The run's validated config; one RunError when this probcl cannot read it."""
        try:
            return from_dict(Config, self.hyper_parameters["config"]).validate()
        except ConfigError as e:
            raise self.incompatible(e) from None

    def incompatible(self, error: ConfigError) -> RunError:
        """The one error for a checkpoint this probcl cannot rebuild (its config, or its method, refuses it)."""
        return RunError(
            f"{self.path} was written by an incompatible probcl version or config ({error}); "
            f"retrain it with this version, or load it with the version that wrote it"
        )

    @cached_property
    def data_info(self) -> DataInfo:
        """The input the run trained on: dataset, channels, image size, classes, normalisation."""
        return DataInfo(**self.hyper_parameters["data_info"])

    def backbone_state(self) -> dict[str, torch.Tensor]:
        """The backbone's weights, named as in the backbone module."""
        return {k.removeprefix(BACKBONE_PREFIX): v for k, v in self.state_dict.items() if k.startswith(BACKBONE_PREFIX)}


def read_checkpoint(run: str | Path, checkpoint: str = "last") -> RunCheckpoint:
    """The checkpoint of a run directory (``last`` or ``best``) or a ``.ckpt`` file; one RunError when there is none,
    it cannot be read, or it is not a probcl checkpoint."""
    path = find_checkpoint(run, checkpoint)
    try:
        saved = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the same thing here
        raise RunError(f"cannot read checkpoint {path}: {torch_load_problem(path, e)}") from None
    hyper_parameters = saved.get("hyper_parameters") if isinstance(saved, dict) else None
    if (
        not isinstance(hyper_parameters, dict)
        or "config" not in hyper_parameters
        or "data_info" not in hyper_parameters
        or not isinstance(saved.get("state_dict"), dict)
    ):
        raise RunError(f"{path} is not a probcl checkpoint (no config, data statistics and weights in it)")
    meta = {
        "path": str(path),
        "epoch": saved.get("epoch"),
        "epochs_completed": epochs_completed(saved),
        "global_step": saved.get("global_step"),
    }
    return RunCheckpoint(path, hyper_parameters, saved["state_dict"], meta)


class RunBackbone(Inference, nn.Module):
    """A run's backbone and input normalisation, read from its checkpoint: ``embed`` gives the features the run's
    method gives (bit for bit: the same modules, weights and computation), without building the method."""

    def __init__(self, checkpoint: RunCheckpoint) -> None:
        super().__init__()
        cfg, self.data_info = checkpoint.config, checkpoint.data_info
        self.normalizer = Normalizer(self.data_info.mean, self.data_info.std)
        self.memory_format = memory_format_for(cfg)
        self.backbone = build_backbone(cfg.model, self.data_info.channels).to(memory_format=self.memory_format)
        state, own = checkpoint.backbone_state(), self.backbone.state_dict()
        if set(state) != set(own) or any(state[k].shape != own[k].shape for k in own):
            raise RunError(
                f"{checkpoint.path}: its backbone weights do not match the backbone its config describes "
                f"(model.backbone={cfg.model.backbone}); the checkpoint is damaged or from an incompatible "
                f"probcl version"
            )
        self.backbone.load_state_dict(state)

    def embed_batch(self, images: torch.Tensor) -> torch.Tensor:
        """Backbone features (N, feature_dim) of one uint8 or [0, 1] float batch, with autograd."""
        return backbone_features(
            self.backbone, self.normalizer, self.memory_format, images, self.normalizer.mean.device
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.embed_batch(images)
