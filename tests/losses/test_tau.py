"""TaU losses against a plain loop of Algorithm 1, SimCLR and MoCo at the matching temperature, finite differences."""

import math

import pytest
import torch
import torch.nn.functional as F

from probcl.losses.tau import tau_info_nce_loss, tau_nt_xent_loss

# ----------------------------------------------------------------------------- plain references


def loop_tau_simclr(z1, z2, u1, u2, scale):
    """Algorithm 1 written plainly: anchor i of the 2N views, alpha_i = sigmoid(u_i) / scale scales its row."""
    z = torch.cat([z1, z2]).double()
    z = z / z.norm(dim=1, keepdim=True)
    u = torch.cat([u1, u2]).double()
    n2 = len(z)
    total = 0.0
    for i in range(n2):
        alpha = 1.0 / (1.0 + math.exp(-float(u[i]))) / scale
        partner = (i + n2 // 2) % n2
        denom = sum(math.exp(alpha * float(z[i] @ z[k])) for k in range(n2) if k != i)
        total += -(alpha * float(z[i] @ z[partner]) - math.log(denom))
    return total / n2


def plain_nt_xent(z1, z2, tau):
    """SimCLR's NT-Xent at a fixed temperature (a loop over the 2N anchors)."""
    z = torch.cat([z1, z2]).double()
    z = z / z.norm(dim=1, keepdim=True)
    n2 = len(z)
    total = 0.0
    for i in range(n2):
        partner = (i + n2 // 2) % n2
        denom = sum(math.exp(float(z[i] @ z[k]) / tau) for k in range(n2) if k != i)
        total += -(float(z[i] @ z[partner]) / tau - math.log(denom))
    return total / n2


def plain_info_nce(q, k, queue, tau):
    """MoCo Eq. 1 at a fixed temperature: each query against its key and every queue entry."""
    q, k, queue = (F.normalize(t.double(), dim=1) for t in (q, k, queue))
    total = 0.0
    for i in range(len(q)):
        pos = math.exp(float(q[i] @ k[i]) / tau)
        neg = sum(math.exp(float(q[i] @ n) / tau) for n in queue)
        total += -math.log(pos / (pos + neg))
    return total / len(q)


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


# ----------------------------------------------------------------------------- losses


@pytest.mark.parametrize("u_value,scale", [(0.0, 0.1), (1.3, 0.1), (-2.0, 0.05)])
def test_constant_u_equals_simclr_at_the_matching_temperature(u_value, scale):
    g = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
    u = torch.full((6,), u_value)
    got = tau_nt_xent_loss(z1, z2, u, u, scale, gather=False).item()
    assert abs(got - plain_nt_xent(z1, z2, scale / sigmoid(u_value))) < 1e-6


@pytest.mark.parametrize("shift", [True, False])
def test_constant_u_equals_moco_at_the_matching_temperature(shift):
    g = torch.Generator().manual_seed(1)
    q, k = F.normalize(torch.randn(5, 4, generator=g), dim=1), F.normalize(torch.randn(5, 4, generator=g), dim=1)
    queue = F.normalize(torch.randn(9, 4, generator=g), dim=1)
    u = torch.full((5,), 0.7)
    got = tau_info_nce_loss(q, k, queue, u, 0.1, shift).item()
    assert abs(got - plain_info_nce(q, k, queue, 0.1 / sigmoid(0.7))) < 1e-6


def test_each_anchor_row_is_scaled_by_its_own_temperature():
    g = torch.Generator().manual_seed(2)
    z1, z2 = torch.randn(5, 3, generator=g).double(), torch.randn(5, 3, generator=g).double()
    u1, u2 = 2 * torch.randn(5, generator=g).double(), 2 * torch.randn(5, generator=g).double()
    got = tau_nt_xent_loss(z1, z2, u1, u2, 0.1, gather=False).item()
    assert abs(got - loop_tau_simclr(z1, z2, u1, u2, 0.1)) < 1e-9


def test_gradient_reaches_u_and_matches_finite_differences():
    g = torch.Generator().manual_seed(3)
    z1, z2 = torch.randn(4, 3, generator=g).double(), torch.randn(4, 3, generator=g).double()
    u1 = torch.randn(4, generator=g).double().requires_grad_()
    u2 = torch.randn(4, generator=g).double().requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: tau_nt_xent_loss(z1, z2, a, b, 0.1, gather=False), (u1, u2))
    q, k = F.normalize(z1, dim=1), F.normalize(z2, dim=1)
    queue = F.normalize(torch.randn(6, 3, generator=g).double(), dim=1)
    assert torch.autograd.gradcheck(lambda a: tau_info_nce_loss(q, k, queue, a, 0.1, True), (u1,))


def test_saturated_sigmoid_keeps_loss_and_gradients_finite():
    # sigmoid(-200) is exactly 0 in float32: the masked self-similarity must not turn into 0 * -inf.
    g = torch.Generator().manual_seed(4)
    z1 = torch.randn(4, 3, generator=g).requires_grad_()
    u1 = torch.tensor([-200.0, 0.0, 3.0, 1.0], requires_grad=True)
    u2 = torch.zeros(4, requires_grad=True)
    loss = tau_nt_xent_loss(z1, torch.randn(4, 3, generator=g), u1, u2, 0.1, gather=False)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(u1.grad).all() and torch.isfinite(z1.grad).all()
    assert u1.grad.abs().sum() > 0 and u2.grad.abs().sum() > 0
