"""EBCLR's energy (Eq. 20), discriminative term (Eq. 18) and generative term against plain re-implementations."""

import math

import numpy as np
import pytest
import torch

from probcl.losses.ebclr import discriminative_loss, ebclr_loss, energy
from probcl.losses.nt_xent import nt_xent_loss
from tests.losses.ebclr_reference import direct_energy, direct_minus_log_q


def test_energy_matches_direct_computation():
    rng = np.random.default_rng(0)
    z, refs = rng.normal(size=(3, 4)), rng.normal(size=(5, 4))
    for tau in (0.1, 0.7):
        ours = energy(torch.tensor(z), torch.tensor(refs), tau).numpy()
        expected = [direct_energy(row, refs, tau) for row in z]
        np.testing.assert_allclose(ours, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("others", ["2n-1", "n"])
def test_discriminative_term_is_eq18(others):
    rng = np.random.default_rng(2)
    z1, z2 = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    tau = 0.2
    expected, n_others = direct_minus_log_q(z1, z2, tau, others)
    ours = discriminative_loss(torch.tensor(z1), torch.tensor(z2), tau, others, gather=True).item()
    assert abs(ours - (expected + math.log(n_others))) < 1e-10  # ours drops the constant log N'
    if others == "2n-1":  # -||a - b||^2 / tau = 2 cos / tau - 2 / tau: NT-Xent at tau / 2
        assert abs(ours - nt_xent_loss(torch.tensor(z1), torch.tensor(z2), tau / 2, gather=True).item()) < 1e-10


def test_generative_term_signs_and_lambda():
    rng = np.random.default_rng(3)
    z1, z2, zs = (torch.tensor(rng.normal(size=(4, 3))) for _ in range(3))
    out = ebclr_loss(z1, z2, zs, z2, 0.3, 0.25, "2n-1", gather=True, proj_norm_weight=1e-3)
    e_data = np.mean([direct_energy(r, z2.numpy(), 0.3) for r in z1.numpy()])
    e_samples = np.mean([direct_energy(r, z2.numpy(), 0.3) for r in zs.numpy()])
    reg = 1e-3 * (np.sum(z1.numpy() ** 2) + np.sum(zs.numpy() ** 2))
    disc = direct_minus_log_q(z1.numpy(), z2.numpy(), 0.3, "2n-1")[0] + math.log(7)
    assert abs(out.total.item() - (disc + 0.25 * (e_data - e_samples + reg))) < 1e-10
