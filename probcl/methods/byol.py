"""BYOL (Grill et al. 2020): an online network predicts a slowly moving target network.

Online: h = f(x), z = g(h), p = q(z). Target: EMA copies f_xi, g_xi of f and g, under
stop-gradient. Loss (BYOL Eq. 2-3, scaled by ``w_byol`` as in the CEB paper App. A.6):

    L = w_byol * [ mean_i ||n(p1_i) - n(t2_i)||^2 + mean_i ||n(p2_i) - n(t1_i)||^2 ]

(each direction a batch mean, 0 <= L <= 8 w_byol). After each optimiser step
xi <- tau xi + (1 - tau) theta with tau_k = 1 - (1 - tau_base)(cos(pi k / K) + 1) / 2,
K = the run's total number of optimiser steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch
import torch.nn.functional as F
from torch import nn

from probcl.config import AtLeast, InRange, Positive
from probcl.losses.normalized_mse import byol_loss
from probcl.methods.base import METHODS, SSLMethod, StepOutput
from probcl.methods.capabilities import DirectionalEncoder
from probcl.methods.collapse import CollapseParams, CollapseWatch
from probcl.models.ema import cosine_momentum, momentum_copy
from probcl.models.heads import predictor_head


@dataclass
class BYOLParams(CollapseParams):
    tau_base: Annotated[float, InRange(0, 1, high_open=True)] = 0.99  # target EMA at step 0 (0.996 for 1000 epochs)
    w_byol: Annotated[float, Positive] = 1.0  # loss weight (CEB App. A.6 uses 2 to 5 for C-BYOL)
    pred_hidden: Annotated[int | None, AtLeast(1)] = None  # predictor hidden width; default proj_hidden (BYOL: 4096)


@METHODS.register("byol")
class BYOL(DirectionalEncoder, SSLMethod[BYOLParams]):
    """BYOL; subclasses reuse :meth:`online` and :meth:`target`; the target follows by the cosine EMA."""

    divergence_hint = "lower optim.lr, or raise method_args.tau_base"

    def build(self) -> None:
        super().build()
        mc = self.cfg.model
        self.predictor = predictor_head(mc.proj_out, self.hp.pred_hidden or mc.proj_hidden)
        self.target_backbone = momentum_copy(self.backbone)
        self.target_projector = momentum_copy(self.projector)
        self.collapse_watch = CollapseWatch(self.cfg.method, self.hp.collapse_threshold)

    def online(self, view: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Backbone features h, projection z and prediction p of ``view`` (with gradient)."""
        h = self.backbone(view)
        z = self.projector(h)
        return h, z, self.predictor(z)

    def encoder_mean(self, images: torch.Tensor) -> torch.Tensor:
        """Normalized prediction n(q(g(f(x)))) of uint8/[0,1] images: the mean direction mu_e of BYOL's
        encoder in the CEB view (CEB paper Eq. 13): BYOL is a deterministic :class:`DirectionalEncoder`,
        measured by the local Lipschitz evaluation with the suite's stated kappa."""
        return F.normalize(self.predictor(self.project_batch(images)), dim=1)

    @torch.no_grad()
    def target(self, view: torch.Tensor) -> torch.Tensor:
        """Target projection t of ``view`` (no gradient, not normalized)."""
        return self.target_projector(self.target_backbone(view))

    def momentum_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(self.backbone, self.target_backbone), (self.projector, self.target_projector)]

    def momentum(self, steps_done: int) -> float:
        """tau_k of the cosine ramp after ``steps_done`` optimiser steps."""
        return cosine_momentum(self.hp.tau_base, steps_done, int(self.trainer.estimated_stepping_batches))

    def step(self, view1, view2, batch) -> StepOutput:
        h1, z1, p1 = self.online(view1)
        _, _, p2 = self.online(view2)
        t1, t2 = self.target(view1), self.target(view2)
        loss = self.hp.w_byol * byol_loss(p1, p2, t1, t2)
        std = self.collapse_watch(z1, self.global_step, self.logs_this_step())
        return StepOutput(loss, h1, {"embedding_std": std})

    def after_optimizer_step(self, steps_done: int) -> None:
        super().after_optimizer_step(steps_done)
        if self.logs_this_step():
            self.log("train/tau", self.momentum(steps_done))
