"""Split BatchNorm: BatchNorm over S sub-batches of one process, as S GPUs of a shuffle-BN run would see them.

MoCo (Sec. 3.3) shuffles the key batch across GPUs so that a query and its positive key are
normalised with statistics of *different* samples; otherwise the model can match q and k+ by
their shared batch statistics instead of their content. On one process the same effect needs
the batch split into S groups normalised separately (the MoCo authors' single-GPU demo does
this), with the key batch shuffled before the split. In training mode each group of N / S
consecutive samples gets its own mean and variance; the running statistics are updated with
the mean over the groups. In eval mode this is plain BatchNorm.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from probcl.errors import ConfigError


class SplitBatchNorm(nn.BatchNorm2d):
    """BatchNorm (1-d or 2-d inputs) normalising ``splits`` equal sub-batches separately in training mode."""

    def __init__(self, num_features: int, splits: int, **kwargs) -> None:
        super().__init__(num_features, **kwargs)
        self.splits = splits

    def _check_input_dim(self, input: torch.Tensor) -> None:  # 2-d (N, C) and 4-d (N, C, H, W)
        if input.dim() not in (2, 4):
            raise ValueError(f"expected 2D or 4D input (got {input.dim()}D input)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.splits == 1:
            return super().forward(x)
        n, c = x.shape[:2]
        if n % self.splits:
            raise ConfigError(
                f"split BatchNorm needs a batch divisible by its {self.splits} groups, got {n}; "
                f"choose train.batch_size as a multiple of method_args.split_bn"
            )
        groups = x.reshape(self.splits, n // self.splits, *x.shape[1:]).transpose(0, 1)
        groups = groups.reshape(n // self.splits, self.splits * c, *x.shape[2:])  # groups side by side as channels
        running_mean = self.running_mean.repeat(self.splits) if self.running_mean is not None else None
        running_var = self.running_var.repeat(self.splits) if self.running_var is not None else None
        weight = self.weight.repeat(self.splits) if self.weight is not None else None
        bias = self.bias.repeat(self.splits) if self.bias is not None else None
        if self.momentum is not None:
            momentum = self.momentum
        else:  # None: cumulative average (the only case that reads the count back from the device)
            momentum = 1.0 / (int(self.num_batches_tracked if self.num_batches_tracked is not None else 0) + 1)
        out = F.batch_norm(groups, running_mean, running_var, weight, bias, True, momentum, self.eps)
        if (
            running_mean is not None
            and running_var is not None
            and self.running_mean is not None
            and self.running_var is not None
            and self.num_batches_tracked is not None
        ):
            with torch.no_grad():
                self.running_mean.copy_(running_mean.view(self.splits, c).mean(0))
                self.running_var.copy_(running_var.view(self.splits, c).mean(0))
                self.num_batches_tracked.add_(1)
        out = out.reshape(n // self.splits, self.splits, *x.shape[1:]).transpose(0, 1)
        return out.reshape(x.shape)


def split_batchnorm_(module: nn.Module, splits: int) -> nn.Module:
    """Replace every BatchNorm1d/2d of ``module`` (in place) by a :class:`SplitBatchNorm` with the same state."""
    for name, child in module.named_children():
        if isinstance(child, (nn.BatchNorm1d, nn.BatchNorm2d)) and not isinstance(child, SplitBatchNorm):
            split = SplitBatchNorm(
                child.num_features,
                splits,
                eps=child.eps,
                momentum=child.momentum,
                affine=child.affine,
                track_running_stats=child.track_running_stats,
            )
            split.load_state_dict(child.state_dict())
            setattr(module, name, split.to(next(child.buffers(), torch.zeros(())).device))
        else:
            split_batchnorm_(child, splits)
    return module
