"""The von Mises-Fisher distribution on the unit sphere S^(n-1) (CEB paper, Sec. 2.2 and A.3).

    f_n(z; mu, kappa) = C_n(kappa) exp(kappa mu^T z),
    C_n(kappa) = kappa^(n/2-1) / ((2 pi)^(n/2) I_{n/2-1}(kappa)).

``rsample`` uses Wood's (1994) rejection sampler for the component w = mu^T z and a
Householder reflection that maps e_1 to mu, so samples are differentiable with respect
to ``loc`` (the concentration is treated as a constant: no pathwise gradient to kappa).
The log-normaliser and the mean resultant length A_n(kappa) = I_{n/2}(kappa) /
I_{n/2-1}(kappa) come from :mod:`probcl.distributions.bessel` (float64-accurate for any
n and kappa > 0, in float32 and float64).
"""

from __future__ import annotations

import functools
import math

import torch
from torch.distributions import Distribution, constraints
from torch.distributions.kl import register_kl
from torch.distributions.utils import lazy_property

from probcl.distributions.bessel import bessel_iv_ratio, log_bessel_iv

_MAX_REJECTION_ROUNDS = 1000
# proposals drawn per element in one round: Wood's sampler accepts at least ~0.68 of its proposals (measured for
# n 3-1024, kappa 0.01-1e4), so one element is still pending after a round of 8 with probability < 2e-4 and the
# round's `pending.any()` check, the sampler's only read of the device, runs about once per call (it ran once per
# single-proposal round, ~4 times per call at a batch of 256)
_PROPOSALS_PER_ROUND = 8


def log_normalizer(dim: int, concentration: torch.Tensor) -> torch.Tensor:
    """log C_n(kappa) = (n/2 - 1) log kappa - (n/2) log(2 pi) - log I_{n/2-1}(kappa)."""
    v = dim / 2.0 - 1.0
    kappa = torch.as_tensor(concentration)
    return v * torch.log(kappa) - (dim / 2.0) * math.log(2 * math.pi) - log_bessel_iv(v, kappa)


def mean_resultant_length(dim: int, concentration: torch.Tensor) -> torch.Tensor:
    """A_n(kappa) = E[mu^T z] = I_{n/2}(kappa) / I_{n/2-1}(kappa)."""
    return bessel_iv_ratio(dim / 2.0 - 1.0, torch.as_tensor(concentration))


@functools.lru_cache(maxsize=256)
def vmf_constants(dim: int, kappa: float) -> tuple[float, float]:
    """(log C_n(kappa), A_n(kappa)) for a constant kappa (Python number), computed once on the CPU and cached."""
    k = torch.tensor(kappa, dtype=torch.float64)
    return float(log_normalizer(dim, k)), float(mean_resultant_length(dim, k))


class _UnitSphere(constraints.Constraint):
    """Unit vectors along the last dimension."""

    event_dim = 1

    def check(self, value: torch.Tensor) -> torch.Tensor:
        tol = 1e-3 if value.dtype in (torch.float16, torch.bfloat16) else 1e-5
        return (value.norm(dim=-1) - 1.0).abs() < tol


unit_sphere = _UnitSphere()


class VonMisesFisher(Distribution):
    """vMF(loc, concentration): ``loc`` (..., n) unit mean directions, ``concentration`` (...) kappa > 0."""

    arg_constraints = {"loc": unit_sphere, "concentration": constraints.positive}
    support = unit_sphere
    has_rsample = True

    def __init__(
        self, loc: torch.Tensor, concentration: torch.Tensor | float, validate_args: bool | None = None
    ) -> None:
        if loc.dim() < 1 or loc.shape[-1] < 2:
            raise ValueError(f"loc must have shape (..., n) with n >= 2, got {tuple(loc.shape)}")
        # a constant (Python number) kappa, as in CEB, gets its normaliser from a cache: no per-step Bessel work
        self._constants = (
            vmf_constants(loc.shape[-1], float(concentration))
            if isinstance(concentration, (int, float)) and concentration > 0
            else None
        )
        concentration = torch.as_tensor(concentration, dtype=loc.dtype, device=loc.device)
        batch_shape = torch.broadcast_shapes(loc.shape[:-1], concentration.shape)
        self.loc = loc.expand(*batch_shape, loc.shape[-1])
        self.concentration = concentration.expand(batch_shape)
        self.dim = loc.shape[-1]
        super().__init__(batch_shape, torch.Size([self.dim]), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None) -> VonMisesFisher:
        batch_shape = torch.Size(batch_shape)
        new = VonMisesFisher(
            self.loc.expand(*batch_shape, self.dim), self.concentration.expand(batch_shape), validate_args=False
        )
        new._constants = self._constants
        return new

    # ----------------------------------------------------------------- moments
    @property
    def mean(self) -> torch.Tensor:
        return self.mean_resultant_length.unsqueeze(-1) * self.loc

    @property
    def mode(self) -> torch.Tensor:
        return self.loc

    @lazy_property
    def log_normalizer(self) -> torch.Tensor:
        """log C_n(kappa), shape ``batch_shape``."""
        if self._constants is not None:
            return self.concentration.new_tensor(self._constants[0]).expand(self.batch_shape)
        return log_normalizer(self.dim, self.concentration)

    @lazy_property
    def mean_resultant_length(self) -> torch.Tensor:
        """A_n(kappa), shape ``batch_shape``."""
        if self._constants is not None:
            return self.concentration.new_tensor(self._constants[1]).expand(self.batch_shape)
        return mean_resultant_length(self.dim, self.concentration)

    # ----------------------------------------------------------------- densities
    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return self.log_normalizer + self.concentration * (self.loc * value).sum(-1)

    def entropy(self) -> torch.Tensor:
        """H = -log C_n(kappa) - kappa A_n(kappa)."""
        return -self.log_normalizer - self.concentration * self.mean_resultant_length

    # ----------------------------------------------------------------- sampling
    def rsample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = ()) -> torch.Tensor:
        shape = self._extended_shape(torch.Size(sample_shape))
        kappa = self.concentration.detach().double().expand(shape[:-1])
        w, one_minus_w = _wood_sample(kappa, self.dim)
        tangent = torch.randn(*shape[:-1], self.dim - 1, dtype=torch.float64, device=kappa.device)
        tangent = tangent / tangent.norm(dim=-1, keepdim=True)
        radius = torch.sqrt(one_minus_w * (1.0 + w)).unsqueeze(-1)
        sample_at_e1 = torch.cat([w.unsqueeze(-1), radius * tangent], dim=-1).to(self.loc.dtype)
        return _householder_to(self.loc.expand(shape), sample_at_e1)


def _wood_sample(kappa: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """w = mu^T z ~ f(w) ∝ exp(kappa w) (1 - w^2)^((n-3)/2) by Wood's rejection sampler; returns (w, 1 - w).

    b = (n-1) / (2 kappa + sqrt(4 kappa^2 + (n-1)^2)), x0 = (1-b)/(1+b);
    eps ~ Beta((n-1)/2, (n-1)/2), w = (1 - (1+b) eps) / (1 - (1-b) eps);
    accept if kappa (w - x0) + (n-1) log((1 - x0 w) / (1 - x0^2)) >= log u, u ~ U(0, 1).
    1 - w = 2 b eps / (1 - (1-b) eps) is kept separately for precision at large kappa.
    """
    m = dim - 1.0
    b = m / (2.0 * kappa + torch.sqrt(4.0 * kappa * kappa + m * m))
    x0 = (1.0 - b) / (1.0 + b)
    beta = torch.distributions.Beta(torch.full_like(kappa, m / 2.0), torch.full_like(kappa, m / 2.0))
    w = torch.empty_like(kappa)
    one_minus_w = torch.empty_like(kappa)
    pending = torch.ones_like(kappa, dtype=torch.bool)
    for _ in range(_MAX_REJECTION_ROUNDS):
        eps = beta.sample((_PROPOSALS_PER_ROUND,))  # (K, ...): K i.i.d. proposals per element
        denom = 1.0 - (1.0 - b) * eps
        w_prop = (1.0 - (1.0 + b) * eps) / denom
        omw_prop = 2.0 * b * eps / denom
        log_u = torch.log(torch.rand_like(eps))
        accept = kappa * (w_prop - x0) + m * torch.log((1.0 - x0 * w_prop) / (1.0 - x0 * x0)) >= log_u
        first = accept.to(torch.uint8).argmax(dim=0, keepdim=True)  # the first accepted proposal of each element
        take = pending & accept.any(dim=0)
        w = torch.where(take, w_prop.gather(0, first).squeeze(0), w)
        one_minus_w = torch.where(take, omw_prop.gather(0, first).squeeze(0), one_minus_w)
        pending = pending & ~take
        if not pending.any():
            return w, one_minus_w
    raise RuntimeError(f"vMF rejection sampler did not finish in {_MAX_REJECTION_ROUNDS} rounds (dim={dim})")


def _householder_to(loc: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Rotate samples ``x`` around e_1 into samples around ``loc`` by an orthogonal map Q with Q e_1 = loc.

    Q = -s H_u with u = e_1 + s loc, s = sign(loc_1) (+1 at 0) and H_u = I - 2 u u^T / (u^T u) the
    Householder reflection (H_u e_1 = -s loc). Choosing s keeps u^T u >= 2, so Q is well conditioned
    and differentiable in ``loc`` everywhere, also for loc = +-e_1.
    """
    s = torch.where(loc[..., :1] >= 0, 1.0, -1.0).to(loc.dtype)
    u = s * loc
    u = torch.cat([u[..., :1] + 1.0, u[..., 1:]], dim=-1)
    reflected = x - 2.0 * u * (u * x).sum(-1, keepdim=True) / (u * u).sum(-1, keepdim=True)
    return -s * reflected


@register_kl(VonMisesFisher, VonMisesFisher)
def kl_vmf_vmf(p: VonMisesFisher, q: VonMisesFisher) -> torch.Tensor:
    """KL(p || q) = log C(kp) - log C(kq) + A(kp) (kp - kq mu_q^T mu_p)  (E_p[z] = A(kp) mu_p)."""
    if p.dim != q.dim:
        raise ValueError(f"KL between vMFs on spheres of different dimension ({p.dim} vs {q.dim})")
    cos = (p.loc * q.loc).sum(-1)
    return p.log_normalizer - q.log_normalizer + p.mean_resultant_length * (p.concentration - q.concentration * cos)
