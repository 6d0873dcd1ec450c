"""SimSiam (Chen & He 2021): a predictor and a stop-gradient, no negatives and no momentum encoder.

h = f(x), z = g(h) (projection with BatchNorm on its output), p = q(z) (bottleneck predictor);

    L = D(p1, sg(z2)) / 2 + D(p2, sg(z1)) / 2,   D(p, z) = -cos(p, z)          (SimSiam Eq. 1, 4)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from torch import nn

from probcl.config import AtLeast
from probcl.losses.negative_cosine import simsiam_loss
from probcl.methods.base import METHODS, SSLMethod, StepOutput
from probcl.methods.collapse import CollapseParams, CollapseWatch
from probcl.models.heads import mlp, predictor_head


@dataclass
class SimSiamParams(CollapseParams):
    pred_hidden: Annotated[int | None, AtLeast(1)] = (
        None  # predictor bottleneck; default proj_out // 4 (SimSiam: 2048 -> 512)
    )


@METHODS.register("simsiam")
class SimSiam(SSLMethod[SimSiamParams]):
    """SimSiam with the paper's heads: projection MLP ending in BatchNorm, bottleneck predictor."""

    divergence_hint = "lower optim.lr"

    def build(self) -> None:
        mc = self.cfg.model
        # Sec. 3: BN on every projection layer, the output one included (no affine, as in the authors' code).
        self.projector = nn.Sequential(
            mlp(
                self.feature_dim,
                mc.proj_hidden,
                mc.proj_out,
                mc.proj_layers,
                batch_norm=True,
                act=mc.act,
                last_bias=False,
            ),
            nn.BatchNorm1d(mc.proj_out, affine=False),
        )
        self.predictor = predictor_head(mc.proj_out, self.hp.pred_hidden or max(1, mc.proj_out // 4))
        self.collapse_watch = CollapseWatch(self.cfg.method, self.hp.collapse_threshold)

    def step(self, view1, view2, batch) -> StepOutput:
        h1, h2 = self.backbone(view1), self.backbone(view2)
        z1, z2 = self.projector(h1), self.projector(h2)
        p1, p2 = self.predictor(z1), self.predictor(z2)
        loss = simsiam_loss(p1, p2, z1, z2)
        std = self.collapse_watch(z1, self.global_step, self.logs_this_step())
        return StepOutput(loss, h1, {"embedding_std": std})
