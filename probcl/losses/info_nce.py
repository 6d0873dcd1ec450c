"""InfoNCE against a set of shared negatives, the MoCo objective.

For a query q_i, its positive key k_i and negatives n_1..n_K (all L2-normalized):

    l_i = -log exp(q_i.k_i / tau) / (exp(q_i.k_i / tau) + sum_j exp(q_i.n_j / tau))   (MoCo Eq. 1)

i.e. a (K+1)-way cross-entropy whose correct class is index 0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def queue_logits(q: torch.Tensor, k: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
    """Cosine logits (N, 1 + K): column 0 is q_i.k_i, columns 1..K are q_i.n_j (inputs already normalized)."""
    positive = (q * k).sum(dim=1, keepdim=True)
    return torch.cat([positive, q @ negatives.T.to(q.dtype)], dim=1)


def info_nce_loss(q: torch.Tensor, k: torch.Tensor, negatives: torch.Tensor, temperature: float) -> torch.Tensor:
    """Mean of Eq. 1 over the N queries; ``k`` and ``negatives`` should carry no gradient."""
    logits = queue_logits(q, k, negatives) / temperature
    return F.cross_entropy(logits, torch.zeros(q.shape[0], dtype=torch.long, device=q.device))
