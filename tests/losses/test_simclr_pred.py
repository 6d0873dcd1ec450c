"""SimCLR with a predictor branch: the loss against a case computed by hand, term by term, and its stop-gradient."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from probcl.losses.simclr_pred import simclr_pred_loss


def hand_case() -> tuple[torch.Tensor, ...]:
    # Two pairs in the plane: z1 = [e1, e2], z2 = [e1, -e2] (unnormalized on purpose: NT-Xent and D use directions).
    z1 = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    z2 = torch.tensor([[1.0, 0.0], [0.0, -3.0]])
    # predictions: p1_0 at 60 degrees from z2_0 = e1 (cos 1/2); p1_1 = -e2, equal to z2_1's direction (cos 1);
    # p2_0 at 90 degrees from z1_0 (cos 0); p2_1 opposite to z1_1 = e2 (cos -1)
    p1 = torch.tensor([[0.5, math.sqrt(3) / 2], [0.0, -5.0]])
    p2 = torch.tensor([[0.0, 1.0], [0.0, -0.5]])
    return z1, z2, p1, p2


def test_the_loss_is_simclr_plus_w_times_simsiam_computed_by_hand():
    z1, z2, p1, p2 = hand_case()
    tau, w = 0.5, 3.0
    # NT-Xent (SimCLR Eq. 1) over the 4 views {e1, e2, e1, -e2}: each e1 anchor sees its partner at cos 1 and the two
    # others (e2, -e2) at cos 0; each of e2 / -e2 sees its partner at cos -1 and the two e1 at cos 0.
    l_e1 = -1 / tau + math.log(math.exp(1 / tau) + 2.0)
    l_e2 = 1 / tau + math.log(math.exp(-1 / tau) + 2.0)
    simclr = 2 * (2 * l_e1 + 2 * l_e2) / 4  # the two directions summed: 2 x the mean over the 2N anchors
    # SimSiam Eq. 4: D(p1, z2) = -(1/2 + 1) / 2, D(p2, z1) = -(0 - 1) / 2
    predictive = 0.5 * -(0.5 + 1.0) / 2 + 0.5 * -(0.0 - 1.0) / 2  # = -0.125
    loss, contrastive, pred = simclr_pred_loss(z1, z2, p1, p2, tau, w, gather=False)
    assert contrastive.item() == pytest.approx(simclr, abs=1e-6)
    assert pred.item() == pytest.approx(-0.125, abs=1e-6) and predictive == -0.125
    assert loss.item() == pytest.approx(simclr + w * predictive, abs=1e-5)


def test_the_predictive_term_stops_the_gradient_at_its_targets():
    g = torch.Generator().manual_seed(0)
    z1, z2, p1, p2 = (torch.randn(4, 3, generator=g, requires_grad=True) for _ in range(4))
    _, contrastive, predictive = simclr_pred_loss(z1, z2, p1, p2, 0.2, 1.0, gather=False)
    predictive.backward()
    assert z1.grad is None and z2.grad is None  # sg(z): only the predictions move
    assert p1.grad is not None and p2.grad is not None
    # d D(p, z) / dp for one row, by hand: -(z/|z| - cos * p/|p|) / |p|, times 1/2 (symmetrization) / N (mean)
    p, z = p1[0].detach().double().numpy(), z2[0].detach().double().numpy()
    cos = p @ z / np.linalg.norm(p) / np.linalg.norm(z)
    expected = -(z / np.linalg.norm(z) - cos * p / np.linalg.norm(p)) / np.linalg.norm(p) / 2 / 4
    np.testing.assert_allclose(p1.grad[0].double().numpy(), expected, rtol=1e-5, atol=1e-7)
