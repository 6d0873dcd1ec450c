"""log I_v(x) and I_{v+1}(x) / I_v(x) for real order v >= 0, in torch, for any size of v and x.

torch has no modified Bessel function of arbitrary order, and the exponentially scaled
``ive`` of scipy underflows for large orders at small arguments (``ive(255, 1) == 0``).
The vMF normaliser needs log I_{n/2-1}(kappa) for n up to thousands and kappa from 1e-3
to 1e5, so we compute it in log space with three classical tools:

1. **Uniform asymptotic expansion** for large order (Debye / Olver; DLMF 10.41.3):

       I_nu(nu z) ~ exp(nu eta) / (sqrt(2 pi nu) (1 + z^2)^(1/4)) * sum_k U_k(p) / nu^k,
       eta = sqrt(1 + z^2) + log(z / (1 + sqrt(1 + z^2))),   p = 1 / sqrt(1 + z^2),

   uniformly valid in z > 0. The polynomials U_k come from the recursion DLMF 10.41.9,
   evaluated exactly (fractions) at import. With orders nu >= ``DEBYE_MIN_ORDER`` = 50 and
   U_0..U_7 the truncation error is below 1e-14 relative.

2. **Power series** where x^2 <= 4 (v + 1) (DLMF 10.25.2):

       log I_v(x) = v log(x / 2) - lgamma(v + 1) + log sum_k (x^2/4)^k / (k! (v+1)_k),

   whose k-th term is below 1/k! there, so ``SERIES_TERMS`` = 24 terms reach machine
   precision; it keeps the relative accuracy of log I_v(x) near 0 at small x.

3. **Downward ratio recurrence** elsewhere for orders below 50: with r_k = I_{k+1}(x) / I_k(x),
   I_{k-1} = I_{k+1} + (2k / x) I_k gives r_{k-1} = 1 / (r_k + 2k / x) (DLMF 10.29.1),
   which is stable downwards (it is the backward recurrence of the Gauss continued
   fraction). Starting at w = v + m >= 50 from the Debye values,

       log I_v(x) = log I_w(x) - sum_{j=0}^{m-1} log r_{v+j}(x).

Everything is evaluated in float64 and cast back to the input's dtype, so float32 inputs
get float64-accurate (finite) results; gradients with respect to x flow through.
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch

DEBYE_MIN_ORDER = 50.0
DEBYE_TERMS = 8  # U_0 .. U_7
SERIES_TERMS = 24


def _debye_polynomials(count: int) -> list[list[float]]:
    """Coefficients (by power of p) of U_0..U_{count-1}, DLMF 10.41.9:

    U_{k+1}(p) = p^2 (1 - p^2) U_k'(p) / 2 + (1/8) int_0^p (1 - 5 t^2) U_k(t) dt.
    """
    polys = [[Fraction(1)]]
    for _ in range(count - 1):
        u = polys[-1]
        nxt = [Fraction(0)] * (len(u) + 3)
        for power, c in enumerate(u):
            if power > 0:  # p^2 (1 - p^2) / 2 * power c p^(power-1)
                nxt[power + 1] += c * power / 2
                nxt[power + 3] -= c * power / 2
            nxt[power + 1] += c / (8 * (power + 1))  # (1/8) int t^power
            nxt[power + 3] -= 5 * c / (8 * (power + 3))  # -(5/8) int t^(power+2)
        polys.append(nxt)
    return [[float(c) for c in u] for u in polys]


_U = _debye_polynomials(DEBYE_TERMS)


def _polyval(coeffs: list[float], p: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(p)
    for c in reversed(coeffs):
        out = out * p + c
    return out


def _log_iv_debye(nu: float, x: torch.Tensor) -> torch.Tensor:
    """log I_nu(x) by the uniform asymptotic expansion (accurate for nu >= DEBYE_MIN_ORDER)."""
    z = x / nu
    s = torch.sqrt(1.0 + z * z)
    eta = s + torch.log(z) - torch.log1p(s)
    p = 1.0 / s
    series = torch.ones_like(p)  # u_0 = 1
    for k, u in enumerate(_U[1:], start=1):
        series = series + _polyval(u, p) / nu**k
    return nu * eta - 0.5 * math.log(2 * math.pi * nu) - 0.5 * torch.log(s) + torch.log(series)


def _log_iv_series(v: float, x: torch.Tensor) -> torch.Tensor:
    """log I_v(x) by the power series (accurate for x^2 <= 4 (v + 1)); the sum starts at its k=1 term."""
    q = x * x / 4.0
    term = torch.ones_like(x)
    tail = torch.zeros_like(x)
    for k in range(1, SERIES_TERMS):
        term = term * q / (k * (v + k))
        tail = tail + term
    return v * torch.log(x / 2.0) - math.lgamma(v + 1.0) + torch.log1p(tail)


def _log_iv_and_ratio(v: float, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log I_v(x), I_{v+1}(x) / I_v(x)): Debye expansion plus downward recurrence, series at small x."""
    steps = max(0, math.ceil(DEBYE_MIN_ORDER - v))
    top = v + steps
    log_iv = _log_iv_debye(top, x)
    ratio = torch.exp(_log_iv_debye(top + 1, x) - log_iv)  # r_top
    for k in reversed(range(steps)):  # r_{v+k} = 1 / (r_{v+k+1} + 2 (v+k+1) / x)
        ratio = 1.0 / (ratio + 2.0 * (v + k + 1) / x)
        log_iv = log_iv - torch.log(ratio)
    small = x * x <= 4.0 * (v + 1.0)
    series = _log_iv_series(v, torch.where(small, x, torch.ones_like(x)))  # safe value off-branch
    return torch.where(small, series, log_iv), ratio


def _check(v: float, x: torch.Tensor) -> torch.Tensor:
    if v < 0:
        raise ValueError(f"the Bessel order must be >= 0, got {v}")
    x = torch.as_tensor(x)
    if not torch.is_floating_point(x):
        x = x.to(torch.get_default_dtype())
    return x


def log_bessel_iv(v: float, x: torch.Tensor) -> torch.Tensor:
    """log I_v(x), the modified Bessel function of the first kind, for v >= 0 and x > 0."""
    x = _check(v, x)
    return _log_iv_and_ratio(float(v), x.double())[0].to(x.dtype)


def bessel_iv_ratio(v: float, x: torch.Tensor) -> torch.Tensor:
    """I_{v+1}(x) / I_v(x) for v >= 0 and x > 0 (in (0, 1))."""
    x = _check(v, x)
    return _log_iv_and_ratio(float(v), x.double())[1].to(x.dtype)
