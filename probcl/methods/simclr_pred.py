"""SimCLR with a predictor branch (probcl's own method, issue 45; docs/methods/own.md).

h = f(x), z = g(h) (SimCLR's projection head), p = q(z) (SimSiam's bottleneck predictor);

    L = L_SimCLR(z1, z2; tau) + w * [D(p1, sg(z2)) / 2 + D(p2, sg(z1)) / 2],   D(p, z) = -cos(p, z)

(probcl.losses.simclr_pred). The contrastive term keeps SimCLR's accuracy and calibration; the predictive term is
SimSiam's non-contrastive objective, whose features separate near-OOD classes better in the study.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from probcl.config import AtLeast, Positive
from probcl.losses.simclr_pred import simclr_pred_loss
from probcl.methods.base import METHODS, SSLMethod, StepOutput
from probcl.methods.simclr import SimCLRParams
from probcl.models.heads import predictor_head


@dataclass
class SimCLRPredParams(SimCLRParams):
    predictor_weight: Annotated[float, Positive] = 1.0  # w of the predictive term (> 0; at 0 this is SimCLR)
    pred_hidden: Annotated[int | None, AtLeast(1)] = (
        None  # predictor bottleneck; default proj_out // 4 (SimSiam's shape: 2048 -> 512)
    )


@METHODS.register("simclr-pred")
class SimCLRPred(SSLMethod[SimCLRPredParams]):
    """SimCLR's projection head and loss, plus SimSiam's predictor q on the projections and its stop-gradient
    negative-cosine term, weighted by ``predictor_weight``."""

    def build(self) -> None:
        super().build()  # SimCLR's projection head g
        proj_out = self.cfg.model.proj_out
        self.predictor = predictor_head(proj_out, self.hp.pred_hidden or max(1, proj_out // 4))

    def step(self, view1, view2, batch) -> StepOutput:
        h1, h2 = self.backbone(view1), self.backbone(view2)
        z1, z2 = self.projector(h1), self.projector(h2)
        p1, p2 = self.predictor(z1), self.predictor(z2)
        loss, contrastive, predictive = simclr_pred_loss(
            z1, z2, p1, p2, self.hp.temperature, self.hp.predictor_weight, self.hp.gather_distributed
        )
        return StepOutput(loss, h1, {"simclr_loss": contrastive.detach(), "predictive_loss": predictive.detach()})
