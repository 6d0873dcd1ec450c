"""TaU-MoCo runs MoCo's step with its own query hooks: the loss equals TaU's InfoNCE written out by hand."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from probcl.methods.moco import MomentumContrast
from probcl.methods.tau import TauMoCo

from .helpers import build, views


def tau_reference(q, k, queue, u, scale) -> float:
    """mean_i -log exp(a_i q_i.k_i) / (exp(a_i q_i.k_i) + sum_j exp(a_i q_i.n_j)), a_i = sigmoid(u_i) / scale."""
    q, k, queue = (F.normalize(t.double(), dim=1) for t in (q, k, queue))
    losses = []
    for i in range(len(q)):
        a = 1.0 / (1.0 + math.exp(-float(u[i]))) / scale
        pos = math.exp(a * float(q[i] @ k[i]))
        neg = sum(math.exp(a * float(q[i] @ n)) for n in queue)
        losses.append(-math.log(pos / (pos + neg)))
    return sum(losses) / len(losses)


def spread_u(model) -> None:
    """Give u a different value per input (the head starts at u = 0 everywhere)."""
    last = model.projector[-1]
    with torch.no_grad():
        last.weight[-1].copy_(torch.linspace(-2.0, 2.0, last.weight.shape[1]))
        last.bias[-1].fill_(0.3)


@pytest.mark.parametrize("symmetric", [False, True])
def test_tau_moco_loss_is_the_tau_info_nce_formula(symmetric):
    model = build("tau-moco", queue_size=24, scale=0.2, symmetric=symmetric, bn_splits=1)  # plain BN keys
    assert isinstance(model, TauMoCo) and type(model).step is MomentumContrast.step
    spread_u(model)
    v1, v2 = views()
    queue0 = model.key_queue.queue.clone()
    out = model.step(v1, v2, None)
    with torch.no_grad():
        z1, z2 = model.projector(model.backbone(v1)), model.projector(model.backbone(v2))
        k1, k2 = (model.key_encoder.projector(model.key_encoder.backbone(v)) for v in (v1, v2))
    assert k2.shape[1] == z1.shape[1] - 1  # keys have no u column
    assert z1[:, -1].std() > 0.1
    expected = tau_reference(z1[:, :-1], k2, queue0, z1[:, -1], 0.2)
    if symmetric:
        expected = 0.5 * (expected + tau_reference(z2[:, :-1], k1, queue0, z2[:, -1], 0.2))
    assert out.loss.item() == pytest.approx(expected, abs=1e-5)
    u = torch.cat([z1[:, -1], z2[:, -1]]) if symmetric else z1[:, -1]
    assert out.logs["u_mean"].item() == pytest.approx(u.mean().item(), abs=1e-6)
    assert int(model.key_queue.ptr) == (16 if symmetric else 8)
