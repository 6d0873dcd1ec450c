"""MoCo v2 (He et al. 2020; Chen et al. 2020): a momentum key encoder and a queue of negative keys.

Queries q = n(g(f(x1))) come from the trained encoder, keys k = n(g_k(f_k(x2))) from its
momentum copy (no gradient). Each query is classified against its key and the K keys of
the queue (MoCo Eq. 1, :func:`probcl.losses.info_nce.info_nce_loss`); the batch's keys then
replace the oldest queue entries, and after each optimiser step
theta_k <- m theta_k + (1 - m) theta_q (MoCo Eq. 2).

Under DDP the keys of all ranks are gathered before they are enqueued, so every rank holds
the same queue, and the key encoder's BatchNorm sees a batch shuffled across ranks
(shuffle-BN, MoCo Sec. 3.3) unless ``shuffle_bn`` is off (use ``train.sync_batchnorm``
instead). On one process no shuffle is done.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from probcl.config import ConfigError, check_positive
from probcl.core.distributed import broadcast_, gather_no_grad, rank, world_size
from probcl.losses.info_nce import info_nce_loss, queue_logits
from probcl.methods.base import METHODS, SSLMethod, StepOutput
from probcl.models.ema import ema_update_, momentum_copy
from probcl.models.heads import mlp


@dataclass
class QueueParams:
    """Momentum-encoder and queue settings shared by MoCo and the methods built on it."""

    queue_size: int = 4096  # K negatives; 65536 at ImageNet scale
    momentum: float = 0.99  # key-encoder EMA m; 0.999 at ImageNet scale
    symmetric: bool = False  # also classify q2 against k1 and average the two losses
    proj_batch_norm: bool = False  # MoCo v2's head is Linear-ReLU-Linear, without BatchNorm
    shuffle_bn: bool = True  # shuffle the key batch across ranks under DDP (MoCo Sec. 3.3)

    def __post_init__(self) -> None:
        check_positive("method_args.queue_size", self.queue_size, minimum=1)
        if not 0.0 <= self.momentum < 1.0:
            raise ConfigError(f"method_args.momentum must be in [0, 1), got {self.momentum}")


@dataclass
class MoCoParams(QueueParams):
    temperature: float = 0.2

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("method_args.temperature", self.temperature, strict=True)


@METHODS.register("moco")
class MoCo(SSLMethod):
    """MoCo v2; subclasses reuse :meth:`query`, :meth:`keys`, :meth:`enqueue` and :meth:`contrastive_loss`."""

    Params = MoCoParams
    divergence_hint = "lower optim.lr, or raise method_args.temperature"

    def build(self) -> None:
        mc = self.cfg.model
        self.projector = mlp(self.feature_dim, mc.proj_hidden, mc.proj_out, mc.proj_layers,
                             batch_norm=self.hp.proj_batch_norm, act=mc.act)
        self.key_backbone = momentum_copy(self.backbone)
        self.key_projector = momentum_copy(self.projector)
        if self.hp.queue_size < self.cfg.train.batch_size:
            raise ConfigError(f"method_args.queue_size={self.hp.queue_size} is smaller than train.batch_size="
                              f"{self.cfg.train.batch_size}; raise queue_size (MoCo uses 4096 to 65536)")
        self.register_buffer("queue", F.normalize(torch.randn(self.hp.queue_size, mc.proj_out), dim=1))
        self.register_buffer("queue_ptr", torch.zeros((), dtype=torch.long))

    # ----------------------------------------------------------------- building blocks
    def query(self, view: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Backbone features h and L2-normalized projection q of ``view`` (with gradient)."""
        h = self.backbone(view)
        return h, F.normalize(self.projector(h), dim=1)

    @torch.no_grad()
    def keys(self, view: torch.Tensor) -> torch.Tensor:
        """L2-normalized projection of the momentum encoder (no gradient), in the order of ``view``."""
        shuffle = self.hp.shuffle_bn and world_size() > 1
        view, restore = _shuffle_across_ranks(view) if shuffle else (view, None)
        k = F.normalize(self.key_projector(self.key_backbone(view)), dim=1)
        return restore(k) if restore is not None else k

    @torch.no_grad()
    def enqueue(self, keys: torch.Tensor) -> None:
        """Replace the oldest queue entries with the keys of all ranks (rank order), identically on every rank."""
        keys = gather_no_grad(keys)
        size = self.queue.shape[0]
        if keys.shape[0] > size:
            raise ConfigError(f"method_args.queue_size={size} is smaller than the {keys.shape[0]} keys of one "
                              f"global batch; raise queue_size")
        ptr = int(self.queue_ptr)
        slots = (ptr + torch.arange(keys.shape[0], device=self.queue.device)) % size
        self.queue[slots] = keys.to(self.queue.dtype)
        self.queue_ptr.fill_((ptr + keys.shape[0]) % size)

    def contrastive_loss(self, q: torch.Tensor, k: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
        """Eq. 1: cross-entropy of [q.k, q.negatives^T] / T with the positive at index 0."""
        return info_nce_loss(q, k, negatives, self.hp.temperature)

    # ----------------------------------------------------------------- training
    def step(self, view1, view2, batch) -> StepOutput:
        negatives = self.queue.clone()  # a snapshot: the queue is updated before backward
        h1, q1 = self.query(view1)
        k2 = self.keys(view2)
        loss = self.contrastive_loss(q1, k2, negatives)
        if self.hp.symmetric:
            _, q2 = self.query(view2)
            k1 = self.keys(view1)
            loss = 0.5 * (loss + self.contrastive_loss(q2, k1, negatives))
            self.enqueue(k1)  # both views' keys join the queue: it turns over twice as fast
        self.enqueue(k2)
        with torch.no_grad():
            accuracy = (queue_logits(q1, k2, negatives).argmax(dim=1) == 0).float().mean()
        return StepOutput(loss, h1, {"key_top1": accuracy})

    def after_optimizer_step(self) -> None:
        """Eq. 2: theta_k <- m theta_k + (1 - m) theta_q."""
        ema_update_(self.key_backbone, self.backbone, self.hp.momentum)
        ema_update_(self.key_projector, self.projector, self.hp.momentum)


def _shuffle_across_ranks(x: torch.Tensor) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """This rank's slice of the globally shuffled batch, and a function that undoes the shuffle."""
    everything = gather_no_grad(x)
    order = broadcast_(torch.randperm(everything.shape[0], device=x.device))
    mine = order.view(world_size(), -1)[rank()]
    inverse = torch.argsort(order).view(world_size(), -1)[rank()]

    def restore(y: torch.Tensor) -> torch.Tensor:
        return gather_no_grad(y)[inverse]

    return everything[mine], restore
