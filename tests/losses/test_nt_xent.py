"""NT-Xent against a hand-computed case and an independent loop implementation."""

import math

import torch

from probcl.losses.nt_xent import nt_xent_loss


def loop_nt_xent(z1, z2, tau):
    """SimCLR Eq. 1 written plainly: for each of the 2N views, -log softmax of its partner over the others."""
    z = torch.cat([z1, z2]).double()
    z = z / z.norm(dim=1, keepdim=True)
    n2 = len(z)
    n = n2 // 2
    total = 0.0
    for i in range(n2):
        partner = (i + n) % n2
        denom = sum(math.exp(float(z[i] @ z[k]) / tau) for k in range(n2) if k != i)
        total += -(float(z[i] @ z[partner]) / tau - math.log(denom))
    return total / n2


def test_hand_computed_two_pairs():
    # z1 = [e1, e2], z2 = [e1, -e2]: anchor e1 (view 1) has sims e1:1 (partner), e2:0, -e2:0.
    z1 = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    z2 = torch.tensor([[1.0, 0.0], [0.0, -1.0]])
    tau = 0.5
    e = math.exp
    # anchors e1 (x2): partner sim 1, others 0, 0.
    l_e1 = -(1 / tau) + math.log(e(1 / tau) + 2 * e(0))
    # anchor e2 (view 1): partner -e2 sim -1; others e1: 0, e1: 0.
    l_e2 = -(-1 / tau) + math.log(e(-1 / tau) + 2 * e(0))
    expected = (2 * l_e1 + 2 * l_e2) / 4
    assert abs(nt_xent_loss(z1, z2, tau, gather=True).item() - expected) < 1e-6


def test_matches_loop_implementation_and_is_scale_invariant():
    g = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
    for tau in (0.1, 0.5, 1.0):
        assert abs(nt_xent_loss(z1, z2, tau, gather=True).item() - loop_nt_xent(z1, z2, tau)) < 1e-5
    assert (
        abs(nt_xent_loss(3 * z1, 0.5 * z2, 0.2, gather=True).item() - nt_xent_loss(z1, z2, 0.2, gather=True).item())
        < 1e-6
    )
