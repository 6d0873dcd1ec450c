"""SimCLR with a predictor branch (issue 45): its step against the equation on the model's own heads, the predictor's
shape, what trains what, and the predictor weight's bound (tests/methods/test_params_bounds.py lists it too)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from probcl.config import ConfigError

from .helpers import build, views


def unit(x: torch.Tensor) -> np.ndarray:
    x = x.detach().double().numpy()
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def nt_xent_loop(z1: np.ndarray, z2: np.ndarray, tau: float) -> float:
    """SimCLR Eq. 1 for each of the 2N views, averaged."""
    z = np.concatenate([unit(torch.from_numpy(z1)), unit(torch.from_numpy(z2))])
    n = len(z1)
    total = 0.0
    for i in range(2 * n):
        partner = (i + n) % (2 * n)
        denominator = sum(math.exp(z[i] @ z[k] / tau) for k in range(2 * n) if k != i)
        total += -(z[i] @ z[partner] / tau - math.log(denominator))
    return total / (2 * n)


def test_the_step_is_simclr_plus_w_times_the_predictive_term_on_its_own_heads():
    model = build("simclr-pred", temperature=0.3, predictor_weight=2.5)
    v1, v2 = views()
    out = model.step(v1, v2, None)
    with torch.no_grad():
        z1, z2 = model.projector(model.backbone(v1)), model.projector(model.backbone(v2))
        p1, p2 = model.predictor(z1), model.predictor(z2)
    simclr = 2 * nt_xent_loop(z1.double().numpy(), z2.double().numpy(), 0.3)
    predictive = -0.5 * np.mean((unit(p1) * unit(z2)).sum(1)) - 0.5 * np.mean((unit(p2) * unit(z1)).sum(1))
    assert out.loss.item() == pytest.approx(simclr + 2.5 * predictive, abs=1e-4)
    assert out.logs["simclr_loss"].item() == pytest.approx(simclr, abs=1e-4)
    assert out.logs["predictive_loss"].item() == pytest.approx(predictive, abs=1e-5)
    # SimSiam's bottleneck predictor on SimCLR's projection head: proj_out -> proj_out // 4 -> proj_out
    assert model.predictor[0].out_features == model.cfg.model.proj_out // 4
    assert model.predictor[-1].out_features == model.cfg.model.proj_out


def test_every_part_trains_the_predictor_included():
    model = build("simclr-pred", pred_hidden=5)
    assert model.predictor[0].out_features == 5
    model.step(*views(), None).loss.backward()
    for part in (model.backbone, model.projector, model.predictor):
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in part.parameters() if p.requires_grad)


@pytest.mark.parametrize("weight", [0.0, -1.0])
def test_a_predictor_weight_that_is_not_positive_is_refused_with_its_range(weight):
    with pytest.raises(ConfigError, match=rf"method_args.predictor_weight must be > 0, got {weight}"):
        build("simclr-pred", predictor_weight=weight)
