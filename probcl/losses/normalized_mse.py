"""BYOL's regression loss between normalized predictions and targets.

    L(p, t) = || p/||p|| - t/||t|| ||^2 = 2 - 2 cos(p, t)                    (BYOL Eq. 2)

The symmetric BYOL objective is L(p1, t2) + L(p2, t1) (BYOL Eq. 3), each term averaged
over the batch, so a perfect predictor gives 0 and orthogonal pairs give 4.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def normalized_mse(p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Per-sample ||n(p) - n(t)||^2 (N,); ``t`` is detached (stop-gradient on the target)."""
    return (F.normalize(p, dim=1) - F.normalize(t.detach(), dim=1)).pow(2).sum(dim=1)


def byol_loss(p1: torch.Tensor, p2: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor) -> torch.Tensor:
    """Eq. 3: batch mean of L(p1, t2) plus batch mean of L(p2, t1)."""
    return normalized_mse(p1, t2).mean() + normalized_mse(p2, t1).mean()
