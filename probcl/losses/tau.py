"""TaU: contrastive losses whose temperature is predicted per anchor (Zhang et al., "Temperature as Uncertainty").

The encoder emits an embedding and a raw scalar u per view. Each anchor's logits are
scaled by its own inverse temperature (Algorithm 1; appendix A "Optimization Stability"):

    alpha(x) = sigmoid(u(x)) / scale,   i.e. temperature tau(x) = scale / sigmoid(u(x)) > scale

    l_i = -alpha_i s(i, p(i)) + log sum_{k != i} exp(alpha_i s(i, k))                  (Alg. 1)

with s the cosine similarity. With a constant u this is NT-Xent (resp. InfoNCE) at the
fixed temperature scale / sigmoid(u).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from probcl.losses.info_nce import queue_logits
from probcl.losses.nt_xent import nt_xent_logits


def inverse_temperature(u: torch.Tensor, scale: float) -> torch.Tensor:
    """alpha = sigmoid(u) / scale, in (0, 1 / scale) (appendix A)."""
    return torch.sigmoid(u) / scale


def scale_rows(logits: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Multiply row i of ``logits`` by ``alpha[i]``, keeping -inf (masked) entries at -inf.

    Masked entries are zeroed before the product so that no -inf * alpha term reaches the
    gradient of alpha (it would turn into NaN through 0 * inf).
    """
    masked = torch.isneginf(logits)
    finite = logits.masked_fill(masked, 0.0)
    return (finite * alpha[:, None]).masked_fill(masked, float("-inf"))


def tau_nt_xent_loss(
    z1: torch.Tensor, z2: torch.Tensor, u1: torch.Tensor, u2: torch.Tensor, scale: float, gather: bool
) -> torch.Tensor:
    """TaU + SimCLR (Algorithm 1): mean over the 2N local anchors of NT-Xent with per-anchor alpha.

    ``z1, z2``: (N, d) embeddings of the two views (normalized here); ``u1, u2``: (N,) raw
    temperature outputs. Each anchor's row over the 2N - 1 other views (its partner included,
    itself masked; gathered across ranks under DDP) is scaled by the anchor's own alpha.
    """
    sim, pos_idx = nt_xent_logits(z1, z2, gather)
    alpha = inverse_temperature(torch.cat([u1, u2]), scale)
    return F.cross_entropy(scale_rows(sim, alpha), pos_idx)


def tau_info_nce_loss(
    q: torch.Tensor, k: torch.Tensor, negatives: torch.Tensor, u_q: torch.Tensor, scale: float, shift: bool
) -> torch.Tensor:
    """TaU + MoCo v2: InfoNCE of each query against its key and the queue, scaled by the query's alpha.

    ``q``: (N, d) queries, ``k``: (N, d) keys (no gradient), ``negatives``: (K, d) queue, all
    L2-normalized; ``u_q``: (N,) raw temperature outputs of the queries. With ``shift`` the
    cosine logits become ``cos - 1`` before scaling, as in the authors' code: every logit is
    then <= 0; the shift is the same for a whole row, so the loss value is unchanged.
    """
    logits = queue_logits(q, k, negatives)
    if shift:
        logits = logits - 1.0
    alpha = inverse_temperature(u_q, scale)
    targets = torch.zeros(len(q), dtype=torch.long, device=q.device)
    return F.cross_entropy(logits * alpha[:, None], targets)
