"""Parts a method owns instead of inheriting them from another method: MoCo's key path and queue.

* :class:`MomentumKeyEncoder`: frozen EMA copies of an online backbone and projection head
  that turn a view into L2-normalized keys without gradient (MoCo Sec. 3.2). The owning
  method lists ``(online, key_encoder.<copy>)`` in its ``momentum_pairs`` and the base class
  applies theta_k <- m theta_k + (1 - m) theta_q (MoCo Eq. 2) after each optimiser step.
  Under DDP the key batch is shuffled across ranks for BatchNorm (shuffle-BN, MoCo Sec. 3.3)
  unless ``shuffle_bn`` is off (use ``train.sync_batchnorm`` instead). On one process the key
  batch is shuffled and its BatchNorm statistics are taken per sub-batch (``bn_splits`` groups,
  :class:`~probcl.models.split_bn.SplitBatchNorm`, as in the MoCo authors' single-GPU demo), so a
  key is normalized with the statistics of other samples than its query's.
* :class:`KeyQueue`: a FIFO dictionary of keys (MoCo Sec. 3.1), identical on every rank.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import torch
import torch.nn.functional as F
from torch import nn

from probcl.config import AtLeast, ConfigError, InRange, ModelConfig
from probcl.models.ema import momentum_copy
from probcl.models.heads import mlp
from probcl.models.split_bn import SplitBatchNorm, split_batchnorm_
from probcl.runtime.distributed import broadcast_, gather_no_grad, rank, world_size


@dataclass
class MomentumKeyParams:
    """Settings of a :class:`MomentumKeyEncoder` and the MoCo v2 head it copies."""

    momentum: Annotated[float, InRange(0, 1, high_open=True)] = 0.99  # key-encoder EMA m; 0.999 at ImageNet scale
    shuffle_bn: bool = True  # shuffle the key batch across ranks under DDP (MoCo Sec. 3.3), or split BN on one process
    bn_splits: Annotated[int, AtLeast(1)] = 8  # one process: BatchNorm groups of the shuffled key batch (1 = off)
    proj_batch_norm: bool = False  # MoCo v2's head is Linear-ReLU-Linear, without BatchNorm


@dataclass
class QueueParams(MomentumKeyParams):
    """A momentum key encoder and a :class:`KeyQueue` of negatives (MoCo and TaU-MoCo)."""

    queue_size: Annotated[int, AtLeast(1)] = 4096  # K negatives; 65536 at ImageNet scale
    symmetric: bool = False  # also classify q2 against k1 and average the two losses


def moco_head(feature_dim: int, mc: ModelConfig, batch_norm: bool, extra_outputs: int = 0) -> nn.Sequential:
    """MoCo v2's projection MLP to ``mc.proj_out + extra_outputs`` units (BatchNorm only when asked)."""
    return mlp(
        feature_dim, mc.proj_hidden, mc.proj_out + extra_outputs, mc.proj_layers, batch_norm=batch_norm, act=mc.act
    )


class MomentumKeyEncoder(nn.Module):
    """Frozen copies ``backbone`` and ``projector`` of the online networks; ``forward`` gives their keys."""

    def __init__(self, backbone: nn.Module, projector: nn.Module, shuffle_bn: bool, bn_splits: int = 1) -> None:
        super().__init__()
        self.backbone = momentum_copy(backbone)
        self.projector = momentum_copy(projector)
        self.shuffle_bn = shuffle_bn
        self.bn_splits = bn_splits
        if shuffle_bn and bn_splits > 1:  # same parameters and buffers, so EMA pairs and checkpoints are unchanged
            split_batchnorm_(self.backbone, 1)
            split_batchnorm_(self.projector, 1)
            self.requires_grad_(False)

    @torch.no_grad()
    def forward(self, view: torch.Tensor) -> torch.Tensor:
        """L2-normalized keys (no gradient), in the order of ``view``."""
        if self.shuffle_bn and world_size() > 1:
            view, restore = _shuffle_across_ranks(view)
            return restore(self.keys(view))
        groups = split_groups(len(view), self.bn_splits)
        if not (self.shuffle_bn and self.training and groups > 1):
            return self.keys(view)
        order = torch.randperm(len(view), device=view.device)
        self._set_splits(groups)
        try:
            shuffled = self.keys(view[order])
        finally:
            self._set_splits(1)
        keys = torch.empty_like(shuffled)
        keys[order] = shuffled
        return keys

    def keys(self, view: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.projector(self.backbone(view)), dim=1)

    def _set_splits(self, groups: int) -> None:
        for module in self.modules():
            if isinstance(module, SplitBatchNorm):
                module.splits = groups


def split_groups(n: int, most: int) -> int:
    """The number of BatchNorm groups for a key batch of ``n``: the largest divisor of ``n`` up to ``most`` that
    leaves at least 2 samples per group (a last, smaller batch gets fewer groups; 1 = plain BatchNorm)."""
    return max((s for s in range(1, most + 1) if n % s == 0 and n // s >= 2), default=1)


class KeyQueue(nn.Module):
    """A FIFO of ``size`` keys of dimension ``dim`` (buffers ``queue``, ``ptr``), started with random unit vectors."""

    queue: torch.Tensor
    ptr: torch.Tensor

    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.register_buffer("queue", F.normalize(torch.randn(size, dim), dim=1))
        self.register_buffer("ptr", torch.zeros((), dtype=torch.long))

    def snapshot(self) -> torch.Tensor:
        """A copy of the keys, for a loss whose backward runs after :meth:`enqueue` changed the queue."""
        return self.queue.clone()

    @torch.no_grad()
    def enqueue(self, keys: torch.Tensor) -> None:
        """Replace the oldest entries with the keys of all ranks (in rank order), identically on every rank."""
        keys = gather_no_grad(keys)
        size = self.queue.shape[0]
        if keys.shape[0] > size:
            raise ConfigError(
                f"method_args.queue_size={size} is smaller than the {keys.shape[0]} keys of one "
                f"global batch; raise queue_size"
            )
        slots = (self.ptr + torch.arange(keys.shape[0], device=self.queue.device)) % size  # on the device: no sync
        self.queue[slots] = keys.to(self.queue.dtype)
        self.ptr.copy_((self.ptr + keys.shape[0]) % size)


# Checkpoint names from before the key path and the queue became components (owner attributes).
LEGACY_KEY_ENCODER_NAMES = {"key_backbone": "key_encoder.backbone", "key_projector": "key_encoder.projector"}
LEGACY_QUEUE_NAMES = {"queue": "key_queue.queue", "queue_ptr": "key_queue.ptr"}


def rename_state_keys(renames: dict[str, str]) -> Callable[..., None]:
    """A ``load_state_dict`` pre-hook that maps checkpoint names of an older layout (``old`` or ``old.*``)
    to the current ones, so runs saved before a part became a component still load."""

    def hook(module: nn.Module, state_dict: dict, prefix: str, *args: object) -> None:
        for key in list(state_dict):
            for old, new in renames.items():
                old_key = prefix + old
                if key == old_key or key.startswith(old_key + "."):
                    state_dict[prefix + new + key[len(old_key) :]] = state_dict.pop(key)
                    break

    return hook


def _shuffle_across_ranks(x: torch.Tensor) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """This rank's slice of the globally shuffled batch, and a function that undoes the shuffle."""
    everything = gather_no_grad(x)
    order = broadcast_(torch.randperm(everything.shape[0], device=x.device))
    mine = order.view(world_size(), -1)[rank()]
    inverse = torch.argsort(order).view(world_size(), -1)[rank()]

    def restore(y: torch.Tensor) -> torch.Tensor:
        return gather_no_grad(y)[inverse]

    return everything[mine], restore
