"""C-BYOL (Lee et al. 2021, "Compressive Visual Representations", Sec. 2.3, Figure 6).

BYOL with a stochastic, compressed prediction. Per direction (x, x'):

    mu_e = n(q(g(f(x)))),  z ~ e(z|x) = vMF(mu_e, kappa_e)            (Eq. 14)
    y_hat = n(l(z))        (l: linear, no bias)                          (Eq. 16)
    y = sg(n(g_xi(f_xi(x)))),  mu_b = n(m(y)),  b(z|y) = vMF(mu_b, kappa_b)   (Eq. 15)
    y' = sg(n(g_xi(f_xi(x'))))
    L(x, x') = w_byol ||y_hat - y'||^2 + beta (log e(z|x) - log b(z|y))      (Eq. 17, 23)

summed over both directions (as BYOL's loss here), each a batch mean. m is a trainable
(not EMA) 2-layer MLP; the target f_xi, g_xi follows BYOL's cosine EMA schedule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch
import torch.nn.functional as F
from torch import nn

from probcl.config import AtLeast, NonNegative, Positive
from probcl.distributions.vmf import VonMisesFisher
from probcl.losses.ceb import residual_information
from probcl.losses.normalized_mse import normalized_mse
from probcl.methods.base import METHODS, StepOutput
from probcl.methods.byol import BYOL, BYOLParams
from probcl.methods.capabilities import StochasticEncoder
from probcl.models.heads import mlp
from probcl.runtime.precision import at_least_float32


@dataclass
class CBYOLParams(BYOLParams):
    w_byol: float = 2.0  # weight of the regression term, kappa_d / 2 (App. A.6: 2 for 1000 epochs, 5 for 300)
    kappa_e: Annotated[float, Positive] = 16384.0  # concentration of the forward encoder e(z|x)
    kappa_b: Annotated[float, Positive] = 10.0  # concentration of the backward encoder b(z|y)
    beta: Annotated[float, NonNegative] = 1.0  # compression strength (Eq. 1)
    b_hidden: Annotated[int | None, AtLeast(1)] = None  # hidden width of m (b's mean network); default proj_hidden


@METHODS.register("c-byol")
class CBYOL(StochasticEncoder, BYOL):
    """BYOL's online/target networks plus l (linear) and m (MLP); see the module docstring."""

    Params = CBYOLParams
    hp: CBYOLParams
    divergence_hint = "lower optim.lr, raise method_args.tau_base, or lower method_args.beta"

    def build(self) -> None:
        super().build()
        mc = self.cfg.model
        self.l_net = nn.Linear(mc.proj_out, mc.proj_out, bias=False)
        # beta 0 (no compression) has no b(z|y): an m that no loss reaches would be an unused parameter under
        # DDP, and Adam's weight decay alone shrinks it to 0, where its mean direction is undefined.
        self.m_net = (
            mlp(mc.proj_out, self.hp.b_hidden or mc.proj_hidden, mc.proj_out, 2, batch_norm=True)
            if self.hp.beta > 0
            else None
        )

    @property
    def encoder_concentration(self) -> float:
        """kappa_e of e(z|x) (used by the local Lipschitz evaluation)."""
        return self.hp.kappa_e

    def _direction(
        self, p: torch.Tensor, t_self: torch.Tensor, t_other: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Eq. 17 for one direction: (loss, mean regression term, mean residual information or None at beta 0)."""
        e = VonMisesFisher(F.normalize(at_least_float32(p), dim=1), self.hp.kappa_e)
        z = e.rsample()
        y_hat = self.l_net(z.to(p.dtype))
        regression = normalized_mse(y_hat, t_other).mean()
        if self.m_net is None:
            return self.hp.w_byol * regression, regression, None
        mu_b = F.normalize(at_least_float32(self.m_net(F.normalize(t_self, dim=1))), dim=1)
        residual = residual_information(e, VonMisesFisher(mu_b, self.hp.kappa_b), z).mean()
        return self.hp.w_byol * regression + self.hp.beta * residual, regression, residual

    def step(self, view1, view2, batch) -> StepOutput:
        h1, z1, p1 = self.online(view1)
        _, _, p2 = self.online(view2)
        t1, t2 = self.target(view1), self.target(view2)
        loss12, reg12, res12 = self._direction(p1, t1, t2)
        loss21, reg21, res21 = self._direction(p2, t2, t1)
        logs = {
            "regression": (reg12 + reg21).detach(),
            "embedding_std": self.collapse_watch(z1, self.global_step, self.logs_this_step()),
        }
        if res12 is not None and res21 is not None:
            logs["residual_xzy"] = (0.5 * (res12 + res21)).detach()
        return StepOutput(loss12 + loss21, h1, logs)
