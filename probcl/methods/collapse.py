"""Collapse watch for non-contrastive methods (BYOL, SimSiam and their variants).

SimSiam (Sec. 4.1) monitors the per-dimension standard deviation of the L2-normalized
output: it is 0 when every image maps to one point, and about 1/sqrt(d) when the outputs
are spread uniformly over the unit sphere in d dimensions. The watch logs the mean std
and warns once when std * sqrt(d) falls below a threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_warn

from probcl.config import NonNegative


@dataclass
class CollapseParams:
    """Hyper-parameter shared by the methods that watch for collapse."""

    collapse_threshold: Annotated[float, NonNegative] = (
        0.1  # warn when std * sqrt(d) drops below this (uniform sphere: ~1)
    )


def embedding_std(z: torch.Tensor) -> torch.Tensor:
    """Mean over dimensions of the batch std of the L2-normalized rows of ``z`` (no gradient)."""
    return F.normalize(z.detach().float(), dim=1).std(dim=0).mean()


class CollapseWatch:
    """Computes :func:`embedding_std` and warns (once, rank 0) when it signals collapse."""

    def __init__(self, method: str, threshold: float) -> None:
        self.method, self.threshold, self.warned = method, threshold, False

    def __call__(self, z: torch.Tensor, step: int, inspect: bool = True) -> torch.Tensor:
        """The embedding std of ``z`` (a device tensor, for logging); read back and compared with the threshold
        only when ``inspect`` (the training loop passes its logging steps: no host-device sync in between)."""
        std = embedding_std(z)
        if not inspect:
            return std
        scaled = float(std) * math.sqrt(z.shape[1])
        if not self.warned and scaled < self.threshold:
            self.warned = True
            rank_zero_warn(
                f"{self.method}: the representation is collapsing at step {step}: the per-dimension std of the "
                f"normalized embedding is {float(std):.2e} (x sqrt(d) = {scaled:.3f} < "
                f"method_args.collapse_threshold={self.threshold}; spread-out embeddings give ~1). "
                f"Likely fixes: lower optim.lr, check the predictor and the stop-gradient, use stronger "
                f"augmentation, or a larger batch."
            )
        return std
