"""Proximal SGLD (Eq. 21), MSGLD's noise schedule (Eq. 22) and the replay buffer against hand-computed steps,
the chain rule and a binomial test."""

import numpy as np
import pytest
import torch
from scipy.stats import binomtest

from probcl.losses.ebclr import energy
from probcl.samplers.sgld import MSGLDConfig, MultiStageSGLD, ReplayBuffer, msgld_sigma, proximal_sgld
from tests.losses.ebclr_reference import unit
from tests.samplers.helpers import quadratic_energy


def direct_energy_grad(w, b, v, refs, tau):
    """d E(W v + b) / d v by the chain rule: softmax-weighted 2(z_hat - r_m)/tau through the normalisation."""
    z = w @ v + b
    norm = np.linalg.norm(z)
    z_hat = z / norm
    r_hat = [unit(r) for r in refs]
    logits = np.array([-np.sum((z_hat - r) ** 2) / tau for r in r_hat])
    weights = np.exp(logits - logits.max())
    weights /= weights.sum()
    d_zhat = sum(wm * 2 * (z_hat - r) / tau for wm, r in zip(weights, r_hat))
    d_z = (np.eye(len(z)) - np.outer(z_hat, z_hat)) @ d_zhat / norm
    return w.T @ d_z


def test_sgld_step_follows_the_input_gradient_of_the_energy():
    rng = np.random.default_rng(1)
    w, b, refs = rng.normal(size=(4, 6)), rng.normal(size=4), rng.normal(size=(5, 4))
    v0 = rng.normal(size=(3, 6))
    linear = torch.nn.Linear(6, 4).double()
    with torch.no_grad():
        linear.weight.copy_(torch.tensor(w))
        linear.bias.copy_(torch.tensor(b))
    tau, alpha = 0.5, 1e-3
    energy_fn = lambda v: energy(linear(v), torch.tensor(refs), tau)  # noqa: E731
    v1 = proximal_sgld(energy_fn, torch.tensor(v0), 1, alpha, 1e9, 0.0).samples.numpy()
    for row0, row1 in zip(v0, v1):
        np.testing.assert_allclose((row0 - row1) / alpha, direct_energy_grad(w, b, row0, refs, tau), rtol=1e-8)


def test_clamp_bounds_each_update_coordinate():
    g = torch.Generator().manual_seed(0)
    v0, target = (torch.randn(8, 1, 16, 16, generator=g, dtype=torch.float64) for _ in range(2))
    c, alpha, delta = 3.0, 0.05, 1.0
    grad = c * (v0 - target)
    assert (grad.abs() > delta).any() and (grad.abs() < delta).any()
    step = proximal_sgld(quadratic_energy(target, c), v0, 1, alpha, delta, 0.0).samples - v0
    assert step.abs().max() <= alpha * delta + 1e-12
    torch.testing.assert_close(step, -alpha * grad.clamp(-delta, delta))  # Eq. 21 without noise
    torch.manual_seed(0)
    sigma = 0.2
    noise = proximal_sgld(quadratic_energy(target, c), v0, 1, alpha, delta, sigma).samples - v0 - step
    assert abs(noise.std().item() - sigma) < 0.05 * sigma and abs(noise.mean().item()) < 0.02


@pytest.mark.parametrize("pixel_clamp", [True, False])
def test_sampler_clamps_to_the_pixel_range_only_when_asked(pixel_clamp):
    buffer = ReplayBuffer(4, 1.0, (1, 8, 8))
    sampler = MultiStageSGLD(
        MSGLDConfig(steps=30, step_size=1.0, sigma_min=0.0, sigma_max=0.0, pixel_clamp=pixel_clamp), buffer
    )
    low, high = torch.tensor(-1.0), torch.tensor(1.0)
    out = sampler.sample(
        quadratic_energy(torch.full((4, 1, 8, 8), 100.0), 1.0), 4, lambda n: torch.zeros(n, 1, 8, 8), bounds=(low, high)
    )
    # without the clamp the chain follows Eq. 21 alone: 30 steps of alpha * delta = 1 towards 100
    assert out.samples.max().item() == pytest.approx(1.0 if pixel_clamp else 30.0)


def test_msgld_schedule_below_at_and_above_k():
    counts = torch.tensor([0, 1, 2, 3, 4, 10])
    expected = [0.05, 0.05 - 0.04 / 3, 0.05 - 0.08 / 3, 0.01, 0.01, 0.01]  # Eq. 22 with K = 3
    torch.testing.assert_close(msgld_sigma(counts, 0.01, 0.05, 3), torch.tensor(expected), atol=1e-7, rtol=0)


def test_sampler_applies_each_chains_noise_level_and_counts_uses():
    counts = torch.tensor([0, 1, 2, 3, 6])
    buffer = ReplayBuffer(5, 0.0, (1, 64, 64))
    buffer.load_state_dict({"samples": torch.zeros(5, 1, 64, 64), "counts": counts.clone()})
    sampler = MultiStageSGLD(MSGLDConfig(steps=1, sigma_min=0.01, sigma_max=0.05, decay_uses=3), buffer)
    torch.manual_seed(0)
    idx = torch.randint(5, (40,))
    torch.manual_seed(0)
    out = sampler.sample(lambda v: 0 * v.flatten(1).sum(1), 40, lambda n: None)  # flat energy: pure noise
    used = torch.bincount(idx, minlength=5) > 0
    assert torch.equal(buffer.counts, counts + used.long())  # kappa + 1 for every drawn entry
    for i, entry in enumerate(idx.tolist()):
        sigma = 0.01 + 0.04 * max(0.0, 1 - int(counts[entry]) / 3)  # Eq. 22 at the entry's kappa
        assert abs(out.samples[i].std().item() - sigma) < 0.05 * sigma


@pytest.mark.parametrize("rho", [0.2, 0.6])
def test_reinitialisation_frequency_is_rho(rho):
    torch.manual_seed(1)
    buffer = ReplayBuffer(500, rho, (1, 2, 2))
    buffer.load_state_dict({"samples": torch.zeros(500, 1, 2, 2), "counts": torch.full((500,), 3)})
    reinit_total, draws = 0, 0
    for _ in range(100):
        idx, init, counts, reinit = buffer.draw(50, lambda n: torch.ones(n, 1, 2, 2))
        assert torch.equal(init[reinit], torch.ones(int(reinit.sum()), 1, 2, 2)) and (counts[reinit] == 0).all()
        reinit_total, draws = reinit_total + int(reinit.sum()), draws + 50
    assert binomtest(reinit_total, draws, rho).pvalue > 1e-3


def test_empty_entries_start_from_the_proposal():
    buffer = ReplayBuffer(10, 0.0, (1, 2, 2))
    _, init, counts, reinit = buffer.draw(4, lambda n: torch.full((n, 1, 2, 2), 7.0))
    assert reinit.all() and (init == 7).all() and (counts == 0).all()


def test_zero_noise_sgld_lowers_the_energy_of_a_fixed_model():
    torch.manual_seed(0)
    from probcl.models.backbones import SmallCNN
    from probcl.models.heads import projection_head

    net = torch.nn.Sequential(SmallCNN(1, 4, "none", "leaky_relu"), projection_head(16, 16, 8, norm="none")).double()
    refs = net(torch.rand(16, 1, 12, 12, dtype=torch.float64) * 2 - 1).detach()
    energy_fn = lambda v: energy(net(v), refs, 0.1)  # noqa: E731
    init = torch.rand(8, 1, 12, 12, dtype=torch.float64) * 2 - 1
    out = proximal_sgld(energy_fn, init, 20, 0.05, 1.0, 0.0, (torch.tensor(-1.0), torch.tensor(1.0)))
    before, after = energy_fn(init).detach(), energy_fn(out.samples).detach()
    assert (after < before).all()
    assert all(p.grad is None for p in net.parameters())  # the sampler leaves the model alone
