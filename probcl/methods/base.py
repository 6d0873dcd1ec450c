"""The shared Lightning module every self-supervised method derives from.

A method owns a backbone, its heads and its objective. The base class turns each uint8
batch into two views on the training device, calls the method's :meth:`SSLMethod.step`,
trains an online linear probe on the detached backbone features (solo-learn style,
no gradient to the encoder), stops on a non-finite loss, and builds the optimiser and
the warm-up + cosine schedule. Methods expose ``embed`` (backbone features), ``project``
(projection-head output) and, where they have one, ``uncertainty``.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from probcl.config import Config, from_dict
from probcl.errors import TrainingDivergedError
from probcl.data.augment import Normalizer, ViewGenerator, resolve_view_params
from probcl.core.distributed import world_size
from probcl.models.backbones import build_backbone, memory_format_for
from probcl.models.heads import projection_head
from probcl.methods.optim import build_optimizer, build_scheduler
from probcl.core.registry import Registry

METHODS: Registry[type["SSLMethod"]] = Registry("method")


@dataclass
class DataInfo:
    """What a model needs to know about its training data; stored in every checkpoint."""

    dataset: str
    channels: int
    image_size: int
    num_classes: Optional[int]
    mean: list[float]
    std: list[float]


@dataclass
class StepOutput:
    """What a method's training step returns to the base class."""

    loss: torch.Tensor
    features: torch.Tensor  # backbone features of the first view, for the online probe
    logs: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class NoParams:
    """A method without hyper-parameters of its own."""


class SSLMethod(pl.LightningModule):
    """Base class: subclasses set ``Params`` and implement :meth:`step`."""

    Params: ClassVar[type] = NoParams
    has_uncertainty: ClassVar[bool] = False
    divergence_hint: ClassVar[str] = "lower optim.lr, or raise the temperature"

    def __init__(self, config: dict, data_info: dict) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.cfg: Config = from_dict(Config, config)
        self.data_info = DataInfo(**data_info)
        self.hp = from_dict(self.Params, self.cfg.method_args, "method_args")
        self.normalizer = Normalizer(self.data_info.mean, self.data_info.std)
        self.views = ViewGenerator(resolve_view_params(self.cfg.augment), self.data_info.image_size,
                                   self.data_info.channels, self.normalizer)
        self.backbone = build_backbone(self.cfg.model, self.data_info.channels)
        self.memory_format = memory_format_for(self.cfg)
        self.backbone.to(memory_format=self.memory_format)
        self.feature_dim: int = self.backbone.out_dim
        classes = self.data_info.num_classes
        self.online_probe = nn.Linear(self.feature_dim, classes) if classes else None
        self.build()

    # ----------------------------------------------------------------- to implement
    def build(self) -> None:
        """Create heads and buffers (called at the end of ``__init__``)."""
        mc = self.cfg.model
        self.projector = projection_head(self.feature_dim, mc.proj_hidden, mc.proj_out, mc.proj_layers, mc.norm, mc.act)

    def step(self, view1: torch.Tensor, view2: torch.Tensor, batch: Any) -> StepOutput:
        """The method's objective on two normalized views of the batch."""
        raise NotImplementedError

    def after_optimizer_step(self) -> None:
        """Hook for momentum/EMA updates, queues and banks (runs after every optimiser step)."""

    @classmethod
    def prepare_config(cls, cfg: Config) -> Config:
        """Complete ``cfg`` before a run starts (e.g. from a pretrained encoder); config.yaml records the result."""
        return cfg

    # ----------------------------------------------------------------- public API
    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """Backbone features (N, feature_dim) of uint8 or [0, 1] float images."""
        return self.backbone(self.normalizer(images.to(self.device)).contiguous(memory_format=self.memory_format))

    def project(self, images: torch.Tensor) -> torch.Tensor:
        """Projection-head output (N, d) of uint8 or [0, 1] float images."""
        return self.projector(self.embed(images))

    def uncertainty(self, images: torch.Tensor) -> torch.Tensor:
        """Per-image uncertainty (higher = more uncertain), for methods that define one."""
        raise NotImplementedError(f"method {self.cfg.method!r} has no uncertainty score")

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.embed(images)

    # ----------------------------------------------------------------- training
    def training_views(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The two augmented, normalized views of a uint8 batch, in the backbone's memory format."""
        view1, view2 = self.views(images)
        return view1.contiguous(memory_format=self.memory_format), view2.contiguous(memory_format=self.memory_format)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        images, labels = batch[0], batch[1]
        view1, view2 = self.training_views(images)
        out = self.step(view1, view2, batch)
        if not torch.isfinite(out.loss):
            raise TrainingDivergedError(
                f"{self.cfg.method}: the loss became {out.loss.item()} at step {self.global_step}. "
                f"Likely fix: {self.divergence_hint}. The last good checkpoint is kept in "
                f"{self.cfg.run_dir}/checkpoints/."
            )
        loss = out.loss + self._probe_loss(out.features.detach(), labels)
        batch_size = images.shape[0]
        self.log("train/loss", out.loss, prog_bar=True, batch_size=batch_size)
        for name, value in out.logs.items():
            self.log(f"train/{name}", value, batch_size=batch_size)
        return loss

    def _probe_loss(self, features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        labeled = labels >= 0
        if self.online_probe is None or not labeled.any():
            return features.new_zeros(())
        logits = self.online_probe(features[labeled])
        loss = F.cross_entropy(logits, labels[labeled])
        acc = (logits.argmax(1) == labels[labeled]).float().mean()
        self.log("train/probe_loss", loss, batch_size=int(labeled.sum()))
        self.log("train/probe_acc", acc, batch_size=int(labeled.sum()))
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.after_optimizer_step()

    def trainable_named_parameters(self) -> list[tuple[str, nn.Parameter]]:
        """Parameters the optimiser updates (all but the probe, frozen and momentum copies)."""
        return [(n, p) for n, p in self.named_parameters()
                if p.requires_grad and not n.startswith("online_probe.")]

    def configure_optimizers(self):
        probe = list(self.online_probe.parameters()) if self.online_probe is not None else []
        optimizer = build_optimizer(self.cfg.optim, self.trainable_named_parameters(), probe,
                                    self.cfg.train.batch_size * world_size())
        total = max(1, int(self.trainer.estimated_stepping_batches))
        per_epoch = max(1, total // max(1, self.trainer.max_epochs))
        scheduler = build_scheduler(optimizer, self.cfg.optim, total, per_epoch)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # ----------------------------------------------------------------- exact resume
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["rng_states"] = {
            "torch": torch.get_rng_state(),
            "numpy": np.random.get_state(),
            "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        states = checkpoint.get("rng_states")
        if states is None:
            return
        if world_size() > 1:  # ranks must not share one random stream: reseed them apart
            seed = self.cfg.train.seed + 1000 * int(checkpoint.get("global_step", 0)) + self.global_rank
            torch.manual_seed(seed)
            np.random.seed(seed % 2**32)
            random.seed(seed)
            return
        torch.set_rng_state(states["torch"])
        np.random.set_state(states["numpy"])
        random.setstate(states["python"])
        if states["cuda"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(states["cuda"])

