"""SimCLR with a predictor branch (probcl's own method, issue 45; docs/methods/own.md): SimCLR's NT-Xent and
SimSiam's predictive term on the same projections z = g(f(x)),

    L = L_SimCLR(z1, z2; tau) + w * [D(p1, sg(z2)) / 2 + D(p2, sg(z1)) / 2],   p = q(z),  D(p, z) = -cos(p, z)

L_SimCLR is SimCLR's loss (NT-Xent, SimCLR Eq. 1, summed over the two directions as probcl's ``simclr``), the
bracket SimSiam's symmetrized loss (SimSiam Eq. 1, 4) with its bottleneck predictor q and stop-gradient sg. At
w -> 0 this is SimCLR; the predictive term asks each view's projection to predict the other's.
"""

from __future__ import annotations

import torch

from probcl.losses.negative_cosine import simsiam_loss
from probcl.losses.nt_xent import simclr_loss


def simclr_pred_loss(
    z1: torch.Tensor,
    z2: torch.Tensor,
    p1: torch.Tensor,
    p2: torch.Tensor,
    temperature: float,
    predictor_weight: float,
    gather: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(L, L_SimCLR, the predictive term) of the module docstring's equation; ``p1``, ``p2`` = q(z1), q(z2)."""
    contrastive = simclr_loss(z1, z2, temperature, gather)
    predictive = simsiam_loss(p1, p2, z1, z2)
    return contrastive + predictor_weight * predictive, contrastive, predictive
