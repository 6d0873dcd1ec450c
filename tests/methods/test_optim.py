"""LARS and the warm-up + cosine schedule against their formulas (hand-computed, not the code's own output)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from probcl.config import OptimConfig
from probcl.methods.optim import LARS, build_optimizer, build_scheduler, lr_factor


def _one_step(eta: float, clip: bool, lr: float, wd: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    w0 = torch.randn(5, 3, dtype=torch.float64)
    g = torch.randn(5, 3, dtype=torch.float64)
    p = nn.Parameter(w0.clone())
    p.grad = g.clone()
    LARS([p], lr=lr, momentum=0.9, weight_decay=wd, eta=eta, clip=clip).step()
    return w0, g, p.detach()


@pytest.mark.parametrize("eta,lr,wd", [(0.001, 0.3, 1e-6), (0.02, 1.2, 1e-4)])
def test_lars_step_matches_the_trust_ratio_formula(eta, lr, wd):
    w0, g, w1 = _one_step(eta, False, lr, wd)
    d = g + wd * w0
    trust = eta * w0.norm().item() / d.norm().item()
    assert torch.allclose(w1, w0 - lr * trust * d, rtol=0, atol=1e-12)


def test_lars_over_steps_on_several_tensors_follows_the_momentum_recursion():
    """Three steps on tensors of different shapes (one with a zero gradient: trust 1), against v <- m v + trust g,
    w <- w - lr v written out per tensor."""
    torch.manual_seed(1)
    eta, lr, wd, m = 0.01, 0.5, 1e-3, 0.9
    shapes = [(4, 3), (7,), (2, 2, 3)]
    start = [torch.randn(s, dtype=torch.float64) for s in shapes]
    grads = [[torch.randn(s, dtype=torch.float64) for s in shapes] for _ in range(3)]
    grads[1][1] = torch.zeros(7, dtype=torch.float64)  # wd * w alone: the trust ratio is still defined
    params = [nn.Parameter(w.clone()) for w in start]
    opt = LARS(params, lr=lr, momentum=m, weight_decay=wd, eta=eta)
    expected, velocity = [w.clone() for w in start], [None] * len(shapes)
    for step in range(3):
        for i, p in enumerate(params):
            p.grad = grads[step][i].clone()
            d = grads[step][i] + wd * expected[i]
            trust = eta * expected[i].norm() / d.norm() if expected[i].norm() > 0 and d.norm() > 0 else 1.0
            velocity[i] = trust * d if velocity[i] is None else m * velocity[i] + trust * d
            expected[i] = expected[i] - lr * velocity[i]
        opt.step()
        for p, w in zip(params, expected):
            assert torch.allclose(p.detach(), w, rtol=0, atol=1e-12)


def test_lars_clip_caps_the_local_lr_at_the_global_lr():
    eta, wd = 0.5, 0.0  # a large eta: the trust ratio exceeds the lr, so LARC clips it to exactly lr
    w0, g, w1 = _one_step(eta, True, 0.01, wd)
    trust = eta * w0.norm().item() / g.norm().item()
    assert trust > 0.01
    assert torch.allclose(w1, w0 - 0.01 * g, rtol=0, atol=1e-12)  # lr * (min(trust, lr) / lr) = lr
    w0, g, w1 = _one_step(1e-4, True, 0.5, wd)  # below lr, the trust ratio itself is the local lr (apex LARC)
    assert torch.allclose(w1, w0 - (1e-4 * w0.norm() / g.norm()) * g, rtol=0, atol=1e-12)


def test_lars_default_eta_is_simclrs_and_biases_and_norms_are_plain_sgd_without_decay():
    assert OptimConfig().lars_eta == 0.001
    net = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    opt = build_optimizer(OptimConfig(name="lars", lr=0.1, weight_decay=0.5), list(net.named_parameters()), [], 256)
    adapted, plain = opt.param_groups
    assert [p.shape for p in adapted["params"]] == [torch.Size([3, 4])]
    assert plain["lars"] is False and plain["weight_decay"] == 0.0
    bias = net[0].bias
    before = bias.detach().clone()
    for p in net.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    assert torch.allclose(bias.detach(), before - 0.1 * torch.ones_like(before))  # lr * g, no decay, no trust


def test_warmup_then_cosine_matches_the_formula():
    total, warmup, base = 100, 10, 0.4
    for step in (0, 4, 9):
        assert lr_factor(step, total, warmup, "cosine") == pytest.approx((step + 1) / warmup)
    for step in (10, 37, 55, 99, 100):
        expected = 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))
        assert lr_factor(step, total, warmup, "cosine") == pytest.approx(expected)
    assert lr_factor(100, total, warmup, "cosine", min_ratio=0.1) == pytest.approx(0.1)
    assert lr_factor(50, total, warmup, "constant") == 1.0
    p = nn.Parameter(torch.zeros(2, 2))
    opt = build_optimizer(
        OptimConfig(name="sgd", lr=base, warmup_epochs=1.0), [("w", p)], [nn.Parameter(torch.zeros(1))], 256
    )
    sched = build_scheduler(opt, OptimConfig(name="sgd", lr=base, warmup_epochs=1.0), total, 10)
    lrs = []
    for _ in range(30):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[:10] == pytest.approx([base * (s + 1) / 10 for s in range(10)])
    assert lrs[20] == pytest.approx(base * 0.5 * (1 + math.cos(math.pi * 10 / 90)))
    assert opt.param_groups[1]["lr"] == pytest.approx(OptimConfig().probe_lr * 100)  # the probe is not scheduled


def _adam_by_hand(w: torch.Tensor, grads: list[torch.Tensor], lr: float, eta: float, wd: float) -> torch.Tensor:
    """Adam (betas 0.9 / 0.999, eps 1e-8, no weight decay of its own) on LARS-rescaled gradients, written out."""
    m, v = torch.zeros_like(w), torch.zeros_like(w)
    for t, g in enumerate(grads, 1):
        d = g + wd * w
        d = eta * w.norm() / d.norm() * d  # the TaU authors' LARSWrapper(Adam, eta, clip=False)
        m, v = 0.9 * m + 0.1 * d, 0.999 * v + 0.001 * d * d
        w = w - lr * (m / (1 - 0.9**t)) / ((v / (1 - 0.999**t)).sqrt() + 1e-8)
    return w


def test_adam_lars_is_adam_on_gradients_rescaled_to_norm_eta_times_the_weights_norm():
    torch.manual_seed(0)
    w0 = torch.randn(4, 3, dtype=torch.float64)
    grads = [torch.randn(4, 3, dtype=torch.float64) * scale for scale in (1.0, 50.0, 0.01)]
    lr, eta, wd = 1e-2, 1e-3, 1e-2
    p = nn.Parameter(w0.clone())
    opt = build_optimizer(OptimConfig(name="adam-lars", lr=lr, weight_decay=wd, lars_eta=eta), [("w", p)], [], 256)
    for g in grads:
        p.grad = g.clone()
        opt.step()
    expected = _adam_by_hand(w0, grads, lr, eta, wd)
    torch.testing.assert_close(p.detach(), expected, rtol=0, atol=1e-12)
    plain = nn.Parameter(w0.clone())  # Adam on the raw gradients takes other steps: the rescaling matters
    adam = torch.optim.Adam([plain], lr=lr, weight_decay=wd)
    for g in grads:
        plain.grad = g.clone()
        adam.step()
    assert (plain.detach() - expected).abs().max() > 1e-4
    assert opt.param_groups[0]["weight_decay"] == wd  # restored after each step (folded in, not applied twice)
