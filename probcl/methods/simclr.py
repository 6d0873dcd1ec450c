"""SimCLR (Chen et al. 2020): NT-Xent between the projections of two views."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from probcl.config import Positive
from probcl.losses.nt_xent import simclr_loss
from probcl.methods.base import METHODS, SSLMethod, StepOutput


@dataclass
class SimCLRParams:
    temperature: Annotated[float, Positive] = 0.5  # tau of NT-Xent (SimCLR: 0.5; FMNIST preset 0.2)
    gather_distributed: bool = True  # negatives from all ranks (with gradient) under DDP


@METHODS.register("simclr")
class SimCLR(SSLMethod[SimCLRParams]):
    """h = f(x), z = g(h); loss = loss_a + loss_b: NT-Xent(z1, z2; tau) summed over the two directions, each
    a mean over the N anchors of one view (SimCLR's reference code), i.e. 2 x the mean over the 2N views."""

    def step(self, view1, view2, batch) -> StepOutput:
        h1, h2 = self.backbone(view1), self.backbone(view2)
        z1, z2 = self.projector(h1), self.projector(h2)
        loss = simclr_loss(z1, z2, self.hp.temperature, self.hp.gather_distributed)
        return StepOutput(loss, h1)
