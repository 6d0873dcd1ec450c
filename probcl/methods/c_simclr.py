"""C-SimCLR (Lee et al. 2021, "Compressive Visual Representations", Sec. 2.2, Figure 5).

SimCLR with a stochastic, compressed representation: e(z|x) = vMF(r_x, kappa_e),
b(z|y) = vMF(r_y, kappa_b) with r the L2-normalized projections of the two views,
z ~ e, and the bidirectional CEB loss beta * I(X;Z|Y) - I(Y;Z) with the CatGen decoder
over the batch. No parameters are added; the deterministic backbone output h is the
representation used downstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch
import torch.nn.functional as F

from probcl.config import NonNegative, Positive, PositiveOrInfinite
from probcl.losses.ceb import Candidates, c_simclr_loss, check_c_simclr_args
from probcl.methods.base import METHODS, SSLMethod, StepOutput
from probcl.methods.capabilities import StochasticEncoder


@dataclass
class CSimCLRParams:
    kappa_e: Annotated[float, PositiveOrInfinite] = (
        1024.0  # concentration of the forward encoder e(z|x); .inf = SimCLR limit (beta = 0 only)
    )
    kappa_b: Annotated[float, Positive] = (
        10.0  # concentration of the backward encoder b(z|y); plays SimCLR's 1 / temperature
    )
    beta: Annotated[float, NonNegative] = 1.0  # compression strength (Eq. 1)
    candidates: Candidates = "cross-view"  # CatGen candidates: cross-view (B, paper) | both-views (2B-1, authors' code)
    gather_distributed: bool = True  # candidates from all ranks (with gradient) under DDP

    def __post_init__(self) -> None:
        check_c_simclr_args(self.kappa_e, self.beta, self.candidates)  # the relation between two fields


@METHODS.register("c-simclr")
class CSimCLR(StochasticEncoder, SSLMethod[CSimCLRParams]):
    """h = f(x), r = normalize(g(h)); loss = the sum over both directions of beta I(X;Z|Y) - I(Y;Z), each a
    batch mean (as :func:`probcl.losses.ceb.c_simclr_loss`)."""

    divergence_hint = "lower optim.lr, or lower method_args.beta / kappa_e"

    @property
    def encoder_concentration(self) -> float:
        """kappa_e of e(z|x) (used by the local Lipschitz evaluation)."""
        return self.hp.kappa_e

    def encoder_mean(self, images: torch.Tensor) -> torch.Tensor:
        """Mean direction r_x of e(z|x): the normalized projection of uint8/[0,1] images."""
        return F.normalize(self.project_batch(images), dim=1)

    def step(self, view1, view2, batch) -> StepOutput:
        h1, h2 = self.backbone(view1), self.backbone(view2)
        terms = c_simclr_loss(
            self.projector(h1),
            self.projector(h2),
            self.hp.kappa_e,
            self.hp.kappa_b,
            self.hp.beta,
            self.hp.candidates,
            self.hp.gather_distributed,
        )
        logs = {"info_yz": terms.information.detach()}
        if terms.residual is not None:
            logs["residual_xzy"] = terms.residual.detach()
        return StepOutput(terms.loss, h1, logs)
