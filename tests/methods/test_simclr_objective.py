"""SimCLR's training loss follows the reference code's convention: loss_a + loss_b, the two directions summed."""

from __future__ import annotations

import math

import numpy as np
import torch

from probcl.methods import METHODS

DATA_INFO = dict(dataset="digits", channels=1, image_size=12, num_classes=None, mean=[0.5], std=[0.5])


def direction_loss(anchors: np.ndarray, partners: np.ndarray, others: np.ndarray, tau: float) -> float:
    """Mean over anchors i of -log exp(a_i.p_i/tau) / sum_k exp(a_i.c_k/tau), k over partners and other anchors."""
    losses = []
    for i, a in enumerate(anchors):
        logits = [a @ p / tau for p in partners] + [a @ o / tau for k, o in enumerate(others) if k != i]
        losses.append(-(a @ partners[i] / tau - math.log(sum(math.exp(v) for v in logits))))
    return float(np.mean(losses))


def test_simclr_step_loss_is_the_sum_of_both_directions(tiny_config):
    torch.manual_seed(0)
    cfg = tiny_config("simclr", **{"train.batch_size": 6, "method_args.temperature": 0.5})
    model = METHODS.get("simclr")(cfg.to_dict(), DATA_INFO).train()
    g = torch.Generator().manual_seed(1)
    v1, v2 = torch.randn(6, 1, 12, 12, generator=g), torch.randn(6, 1, 12, 12, generator=g)
    with torch.no_grad():
        loss = model.step(v1, v2, None).loss.item()
        z1 = torch.nn.functional.normalize(model.projector(model.backbone(v1)), dim=1).double().numpy()
        z2 = torch.nn.functional.normalize(model.projector(model.backbone(v2)), dim=1).double().numpy()
    loss_a, loss_b = direction_loss(z1, z2, z1, 0.5), direction_loss(z2, z1, z2, 0.5)
    assert abs(loss - (loss_a + loss_b)) < 1e-5 * (loss_a + loss_b)
