"""MoCo v2 (He et al. 2020; Chen et al. 2020): a momentum key encoder and a queue of negative keys.

Queries q = n(g(f(x1))) come from the trained encoder, keys k = n(g_k(f_k(x2))) from its
momentum copy (no gradient, :class:`~probcl.methods.components.MomentumKeyEncoder`). Each
query is classified against its key and the K keys of the queue (MoCo Eq. 1,
:func:`probcl.losses.info_nce.info_nce_loss`); the batch's keys then replace the oldest
queue entries (:class:`~probcl.methods.components.KeyQueue`), and after each optimiser step
the base class applies theta_k <- m theta_k + (1 - m) theta_q (MoCo Eq. 2) to the declared
momentum pairs.

Under DDP the keys of all ranks are gathered before they are enqueued, so every rank holds
the same queue, and the key encoder's BatchNorm sees a batch shuffled across ranks
(shuffle-BN, MoCo Sec. 3.3) unless ``shuffle_bn`` is off. On one process no shuffle is done.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from probcl.config import ConfigError, Positive
from probcl.losses.info_nce import info_nce_loss, queue_logits
from probcl.methods.base import METHODS, SSLMethod, StepOutput
from probcl.methods.components import (
    LEGACY_KEY_ENCODER_NAMES,
    LEGACY_QUEUE_NAMES,
    KeyQueue,
    MomentumKeyEncoder,
    QueueParams,
    moco_head,
    rename_state_keys,
)


@dataclass
class Queries:
    """One view's query pass: backbone features h, L2-normalized queries q, and a per-query statistic
    that a subclass's loss and logs use (TaU-MoCo: its raw temperature output u)."""

    h: torch.Tensor
    q: torch.Tensor
    stat: torch.Tensor | None = None


QP = TypeVar("QP", bound=QueueParams)


class MomentumContrast(SSLMethod[QP]):
    """MoCo's key encoder, queue and step. A method states its loss in :meth:`query_loss` and may change
    the query side through :meth:`query_head`, :meth:`key_head`, :meth:`queries` and :meth:`query_logs`."""

    def build(self) -> None:
        self.projector = self.query_head()
        self.key_encoder = MomentumKeyEncoder(self.backbone, self.key_head(), self.hp.shuffle_bn, self.hp.bn_splits)
        if self.hp.queue_size < self.cfg.train.batch_size:
            raise ConfigError(
                f"method_args.queue_size={self.hp.queue_size} is smaller than train.batch_size="
                f"{self.cfg.train.batch_size}; raise queue_size (MoCo uses 4096 to 65536)"
            )
        self.key_queue = KeyQueue(self.hp.queue_size, self.cfg.model.proj_out)
        self.register_load_state_dict_pre_hook(rename_state_keys({**LEGACY_KEY_ENCODER_NAMES, **LEGACY_QUEUE_NAMES}))

    def momentum_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(self.backbone, self.key_encoder.backbone), (self.projector, self.key_encoder.projector)]

    def momentum(self, steps_done: int) -> float:
        return self.hp.momentum

    # ----------------------------------------------------------------- hooks for the query side
    def query_head(self) -> nn.Sequential:
        """The trained projection head g."""
        return moco_head(self.feature_dim, self.cfg.model, self.hp.proj_batch_norm)

    def key_head(self) -> nn.Module:
        """The part of :meth:`query_head` whose momentum copy makes keys (all of it here)."""
        return self.projector

    def queries(self, view: torch.Tensor) -> Queries:
        """Backbone features and L2-normalized projections of ``view`` (with gradient)."""
        h = self.backbone(view)
        return Queries(h, F.normalize(self.projector(h), dim=1))

    def query_loss(self, queries: Queries, keys: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
        """The loss of ``queries`` against their ``keys`` and the queue's ``negatives``."""
        raise NotImplementedError(f"{type(self).__name__} must define query_loss")

    def query_logs(self, queries: list[Queries]) -> dict[str, torch.Tensor]:
        """Extra training logs of this step's query passes (none here)."""
        return {}

    # ----------------------------------------------------------------- training
    def step(self, view1, view2, batch) -> StepOutput:
        negatives = self.key_queue.snapshot()  # the queue is updated before backward
        first = self.queries(view1)
        k2 = self.key_encoder(view2)
        loss, passes = self.query_loss(first, k2, negatives), [first]
        if self.hp.symmetric:
            second = self.queries(view2)
            k1 = self.key_encoder(view1)
            loss = 0.5 * (loss + self.query_loss(second, k1, negatives))
            passes.append(second)
            self.key_queue.enqueue(k1)  # both views' keys join the queue: it turns over twice as fast
        self.key_queue.enqueue(k2)
        with torch.no_grad():
            accuracy = (queue_logits(first.q, k2, negatives).argmax(dim=1) == 0).float().mean()
        return StepOutput(loss, first.h, {"key_top1": accuracy, **self.query_logs(passes)})


@dataclass
class MoCoParams(QueueParams):
    temperature: Annotated[float, Positive] = 0.2  # tau of InfoNCE (MoCo v2: 0.2)


@METHODS.register("moco")
class MoCo(MomentumContrast[MoCoParams]):
    """MoCo v2: InfoNCE with a fixed temperature."""

    divergence_hint = "lower optim.lr, or raise method_args.temperature"

    def query_loss(self, queries: Queries, keys: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
        """Eq. 1: cross-entropy of [q.k, q.negatives^T] / T with the positive at index 0."""
        return info_nce_loss(queries.q, keys, negatives, self.hp.temperature)
