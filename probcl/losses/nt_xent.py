"""NT-Xent (normalized temperature-scaled cross-entropy), the SimCLR objective.

For a batch of N pairs (z1_i, z2_i), every one of the 2N views is an anchor whose
positive is its partner view and whose negatives are the other 2N - 2 views:

    l_i = -log exp(s(i, p(i)) / tau) / sum_{k != i} exp(s(i, k) / tau)        (SimCLR Eq. 1)

with s the cosine similarity. Under DDP the candidates are gathered from all ranks
(with gradient), so the loss equals that of one process holding the global batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from probcl.runtime.distributed import gather_batch


def nt_xent_logits(z1: torch.Tensor, z2: torch.Tensor, gather: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine-similarity logits (2N_local, 2N_global) with self-pairs set to -inf, and positive indices.

    Rows are the local anchors [z1; z2]; columns are the global candidates [Z1; Z2].
    """
    z1, z2 = F.normalize(z1, dim=1), F.normalize(z2, dim=1)
    n = z1.shape[0]
    (all1, all2), offset = gather_batch(z1, z2, gather=gather)
    total = all1.shape[0]
    anchors = torch.cat([z1, z2])
    candidates = torch.cat([all1, all2])
    sim = anchors @ candidates.T
    local = torch.arange(n, device=z1.device) + offset
    self_idx = torch.cat([local, local + total])
    pos_idx = torch.cat([local + total, local])
    rows = torch.arange(2 * n, device=z1.device)
    sim = sim.index_put((rows, self_idx), torch.tensor(float("-inf"), device=sim.device, dtype=sim.dtype))
    return sim, pos_idx


def nt_xent_loss(z1: torch.Tensor, z2: torch.Tensor, temperature: float, gather: bool) -> torch.Tensor:
    """Mean NT-Xent loss over the 2N local anchors (Eq. 1 above)."""
    sim, pos_idx = nt_xent_logits(z1, z2, gather)
    return F.cross_entropy(sim / temperature, pos_idx)


def simclr_loss(z1: torch.Tensor, z2: torch.Tensor, temperature: float, gather: bool) -> torch.Tensor:
    """SimCLR's loss as its reference code computes it: loss_a + loss_b, NT-Xent summed over the two directions,
    each a mean over the N anchors of one view, i.e. 2 x the mean over the 2N anchors."""
    return 2.0 * nt_xent_loss(z1, z2, temperature, gather)
