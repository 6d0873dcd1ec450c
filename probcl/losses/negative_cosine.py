"""SimSiam's symmetric negative cosine similarity with stop-gradient.

D(p, z) = - p/||p|| . z/||z||,   L = D(p1, sg(z2)) / 2 + D(p2, sg(z1)) / 2     (SimSiam Eq. 1, 4)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def negative_cosine(p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """Batch mean of D(p, sg(z))."""
    return -F.cosine_similarity(p, z.detach(), dim=1).mean()


def simsiam_loss(p1: torch.Tensor, p2: torch.Tensor, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
    """Eq. 4: the symmetrized loss, minimum -1."""
    return 0.5 * negative_cosine(p1, z2) + 0.5 * negative_cosine(p2, z1)
