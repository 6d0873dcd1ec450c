"""von Mises-Fisher distribution and log-Bessel functions against scipy (and mpmath where scipy underflows)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import scipy.special as sp
import scipy.stats as st
import torch
from torch.distributions import kl_divergence

from probcl.distributions.bessel import bessel_iv_ratio, log_bessel_iv
from probcl.distributions.vmf import VonMisesFisher, log_normalizer

DIMS = [2, 3, 16, 128, 512]
KAPPAS = [0.01, 1.0, 10.0, 1024.0, 16384.0]


def reference_log_iv(v: float, x: float) -> float:
    """log I_v(x) from scipy's exponentially scaled ive, or mpmath (40 digits) where ive underflows."""
    scaled = sp.ive(v, x)
    if scaled > 0 and np.isfinite(scaled):
        return float(np.log(scaled) + x)
    mpmath.mp.dps = 40
    return float(mpmath.log(mpmath.besseli(v, x, maxterms=10**6)))


def reference_log_normalizer(n: int, kappa: float) -> float:
    """log C_n(kappa) = (n/2-1) log kappa - (n/2) log(2 pi) - log I_{n/2-1}(kappa), written plainly."""
    return (n / 2 - 1) * math.log(kappa) - (n / 2) * math.log(2 * math.pi) - reference_log_iv(n / 2 - 1, kappa)


def unit(n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(n)
    return v / np.linalg.norm(v)


@pytest.mark.parametrize("v", [0.0, 0.5, 3.0, 7.0, 49.5, 63.0, 255.0, 1023.0])
def test_log_bessel_matches_scipy_ive(v):
    xs = [1e-3, 0.01, 0.7, 1.0, 10.0, 55.0, 1024.0, 16384.0, 1e5]
    got = log_bessel_iv(v, torch.tensor(xs, dtype=torch.float64)).numpy()
    ref = np.array([reference_log_iv(v, x) for x in xs])
    assert np.all(np.abs(got - ref) <= 1e-10 * np.maximum(np.abs(ref), 1e-3))
    ratio = bessel_iv_ratio(v, torch.tensor(xs, dtype=torch.float64)).numpy()
    ref_ratio = np.exp([reference_log_iv(v + 1, x) - reference_log_iv(v, x) for x in xs])
    np.testing.assert_allclose(ratio, ref_ratio, rtol=1e-8)
    f32 = log_bessel_iv(v, torch.tensor(xs, dtype=torch.float32))
    assert f32.dtype == torch.float32 and torch.isfinite(f32).all()


def test_log_bessel_gradient_is_the_bessel_derivative():
    # d/dx log I_v(x) = v / x + I_{v+1}(x) / I_v(x)  (DLMF 10.29.2)
    x = torch.tensor([0.01, 1.0, 30.0, 1024.0], dtype=torch.float64, requires_grad=True)
    for v in (0.5, 63.0):
        (grad,) = torch.autograd.grad(log_bessel_iv(v, x).sum(), x)
        ref = [v / xi + math.exp(reference_log_iv(v + 1, xi) - reference_log_iv(v, xi)) for xi in x.tolist()]
        np.testing.assert_allclose(grad.numpy(), ref, rtol=1e-8)


@pytest.mark.parametrize("n", DIMS)
def test_log_normalizer_and_log_prob_match_scipy(n):
    mu = unit(n, n)
    kappas = torch.tensor(KAPPAS, dtype=torch.float64)
    got = log_normalizer(n, kappas).numpy()
    ref = np.array([reference_log_normalizer(n, k) for k in KAPPAS])
    assert np.all(np.abs(got - ref) / np.abs(ref) < 1e-4)
    points = np.stack([mu, -mu, unit(n, 1000 + n), unit(n, 2000 + n)])
    for kappa in KAPPAS:
        dist = VonMisesFisher(torch.tensor(mu), kappa)
        logp = dist.log_prob(torch.tensor(points)).numpy()
        with np.errstate(divide="ignore"):
            scipy_logp = st.vonmises_fisher(mu, kappa).logpdf(points)
        if np.all(np.isfinite(scipy_logp)):  # scipy's ive underflows at n=512, kappa <= 10
            ref_logp = scipy_logp
        else:
            ref_logp = reference_log_normalizer(n, kappa) + kappa * points @ mu
        assert np.all(np.abs(logp - ref_logp) / np.abs(ref_logp) < 1e-4), (n, kappa)
        dist32 = VonMisesFisher(torch.tensor(mu, dtype=torch.float32), kappa)
        logp32 = dist32.log_prob(torch.tensor(points, dtype=torch.float32))
        assert logp32.dtype == torch.float32 and torch.isfinite(logp32).all()
        assert torch.isfinite(dist32.entropy()) and torch.isfinite(dist32.rsample((4,))).all()


@pytest.mark.parametrize("n", [3, 16, 128])
def test_entropy_matches_scipy(n):
    mu = unit(n, 7)
    for kappa in (1.0, 10.0, 1024.0):
        got = VonMisesFisher(torch.tensor(mu), kappa).entropy().item()
        assert abs(got - st.vonmises_fisher(mu, kappa).entropy()) < 1e-6 * max(1.0, abs(got))


@pytest.mark.parametrize("n", [3, 128])
@pytest.mark.parametrize("kappa", [1.0, 10.0, 1024.0])
def test_samples_mean_resultant_length_and_direction(n, kappa):
    torch.manual_seed(0)
    mu = torch.tensor(unit(n, 3))
    z = VonMisesFisher(mu, kappa).sample((20000,))
    assert torch.allclose(z.norm(dim=1), torch.ones(len(z), dtype=z.dtype), atol=1e-12)
    w = z @ mu
    a_n = sp.ive(n / 2, kappa) / sp.ive(n / 2 - 1, kappa)  # A_n(kappa) = I_{n/2} / I_{n/2-1}
    se = w.std().item() / math.sqrt(len(w))
    assert abs(w.mean().item() - a_n) < 3 * se
    # the component of the sample mean orthogonal to mu is pure noise: |m_perp|^2 ~ (1 - E w^2)/N chi2_{n-1}/(n-1)
    mean = z.mean(0)
    perp = mean - (mean @ mu) * mu
    scale = (1 - (w**2).mean().item()) / len(w) / (n - 1)
    assert perp.pow(2).sum().item() < scale * st.chi2.ppf(0.999, n - 1)
    assert (mean / mean.norm()) @ mu > 0


@pytest.mark.parametrize("n", [3, 128])
@pytest.mark.parametrize("kappa", [0.5, 10.0, 1024.0])
def test_samples_match_scipy_sampler(n, kappa):
    torch.manual_seed(1)
    mu = unit(n, 5)
    ours = VonMisesFisher(torch.tensor(mu), kappa).sample((3000,)).numpy()
    theirs = st.vonmises_fisher(mu, kappa).rvs(3000, random_state=np.random.default_rng(2))
    direction = unit(n, 6)  # any fixed direction: its component must have the same law
    for project in (mu, direction):
        assert st.ks_2samp(ours @ project, theirs @ project).pvalue > 0.01


def test_kl_matches_monte_carlo_with_scipy_samples():
    n = 16
    mu_p, mu_q = unit(n, 11), unit(n, 12)
    for kp, kq in ((10.0, 3.0), (50.0, 50.0), (2.0, 20.0)):
        p, q = st.vonmises_fisher(mu_p, kp), st.vonmises_fisher(mu_q, kq)
        z = p.rvs(20000, random_state=np.random.default_rng(3))
        diff = p.logpdf(z) - q.logpdf(z)
        got = kl_divergence(VonMisesFisher(torch.tensor(mu_p), kp), VonMisesFisher(torch.tensor(mu_q), kq)).item()
        assert abs(got - diff.mean()) < 4 * diff.std() / math.sqrt(len(diff))


def test_rsample_gradient_to_loc_matches_finite_differences():
    n, kappa = 5, 20.0
    theta0 = torch.tensor([0.3, -0.2, 0.9, 0.1, -0.4], dtype=torch.float64)
    c = torch.tensor([0.5, -1.0, 0.25, 2.0, 0.3], dtype=torch.float64)

    def loss(theta: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(42)  # the same eps, u and tangent draws at every theta
        z = VonMisesFisher(theta / theta.norm(), kappa).rsample((64,))
        return ((z @ c) ** 2).mean() + z[:, 0].mean()

    theta = theta0.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(loss(theta), theta)
    h = 1e-6
    fd = torch.stack(
        [(loss(theta0 + h * e) - loss(theta0 - h * e)) / (2 * h) for e in torch.eye(n, dtype=theta0.dtype)]
    )
    torch.testing.assert_close(grad, fd, rtol=1e-5, atol=1e-7)
    assert grad.abs().sum() > 0


def test_rsample_is_well_defined_at_the_poles_and_batched():
    torch.manual_seed(0)
    loc = torch.tensor([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 1.0]], requires_grad=True)
    dist = VonMisesFisher(loc, torch.tensor([5.0, 5.0, 1e5]))
    z = dist.rsample((2000,))
    assert z.shape == (2000, 3, 3)
    means = z.mean(0)
    assert torch.all((means * loc).sum(-1) > 0.7)
    (grad,) = torch.autograd.grad((z * torch.tensor([0.1, 0.2, 0.3])).sum(), loc)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_invalid_arguments_raise():
    with pytest.raises(ValueError):
        VonMisesFisher(torch.tensor([1.0, 0.0]), -1.0)
    with pytest.raises(ValueError):
        VonMisesFisher(torch.tensor([2.0, 0.0]), 1.0)
    with pytest.raises(ValueError):
        VonMisesFisher(torch.tensor([1.0]), 1.0)
