"""VEM composes its base instead of inheriting MoCo: SimCLR's key path, or a momentum key encoder."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from probcl.losses.info_nce import info_nce_loss
from probcl.methods.components import KeyQueue, MomentumKeyEncoder
from probcl.methods.moco import MomentumContrast

from .helpers import build, views


def parts(model, kind) -> list:
    return [m for m in model.modules() if isinstance(m, kind)]


@pytest.mark.parametrize("method", ["vem-langevin", "vem-svgd", "vem-image"])
def test_base_simclr_has_no_momentum_encoder_and_no_queue(method):
    model = build(method, base="simclr")
    assert not isinstance(model, MomentumContrast)
    assert model.key_encoder is None and model.momentum_pairs() == []
    assert not parts(model, MomentumKeyEncoder) and not parts(model, KeyQueue)
    assert not any(name.startswith("key_") for name in model.state_dict())


@pytest.mark.parametrize("method", ["vem-langevin", "vem-image"])
def test_base_moco_has_a_momentum_encoder_and_its_sampler_replaces_the_queue(method):
    model = build(method, base="moco", momentum=0.9)
    assert parts(model, MomentumKeyEncoder) == [model.key_encoder]
    assert not parts(model, KeyQueue)
    assert len(model.momentum_pairs()) == 2 and model.momentum(1) == 0.9
    assert all(not p.requires_grad for p in model.key_encoder.parameters())
    assert not any(n.startswith("key_") for n, _ in model.trainable_named_parameters())


@pytest.mark.parametrize("base", ["simclr", "moco"])
def test_the_key_comes_from_the_base(base):
    model = build("vem-langevin", base=base, bank_size=16, bn_splits=1)  # plain BN keys: compared by hand
    if base == "moco":  # make the key encoder differ from the online network it was copied from
        with torch.no_grad():
            for p in model.key_encoder.parameters():
                p.mul_(0.5)
    v1, v2 = views()
    sampled, sample = [], model.sample_negatives
    model.sample_negatives = lambda queries, view: sampled.append(sample(queries, view)) or sampled[-1]
    out = model.step(v1, v2, None)
    with torch.no_grad():
        q = F.normalize(model.projector(model.backbone(v1)), dim=1)
        if base == "moco":
            k = F.normalize(model.key_encoder.projector(model.key_encoder.backbone(v2)), dim=1)
        else:
            k = F.normalize(model.projector(model.backbone(v2)), dim=1)
    online_k = F.normalize(model.projector(model.backbone(v2)), dim=1).detach()
    assert (base == "moco") == (not torch.allclose(k, online_k, atol=1e-4))
    assert out.loss.item() == pytest.approx(info_nce_loss(q, k, sampled[0][0], model.hp.temperature).item(), abs=1e-5)


def test_vem_image_negatives_use_running_statistics_and_carry_no_gradient():
    """A particle's negative is its eval-mode projection: independent of the other particles, no gradient."""
    model = build("vem-image", base="simclr", particles=6, steps=1)
    view1, _ = views()
    with torch.no_grad():  # running statistics away from their (0, 1) start, so eval != batch statistics
        for _ in range(3):
            model.backbone(3 * view1 + 1)
    model.image_bank.filled.fill_(6)  # a full bank: this step's images are not written into it afterwards
    queries = F.normalize(torch.randn(8, 8), dim=1)
    negatives, _ = model.sample_negatives(queries, view1)
    assert model.training and model.backbone.training  # the sampler restores train mode
    assert not negatives.requires_grad
    particles = model.image_bank.particles.clone()
    model.eval()
    with torch.no_grad():
        one_at_a_time = torch.cat([model.query(p[None])[1] for p in particles])
    torch.testing.assert_close(negatives, one_at_a_time, rtol=1e-5, atol=1e-6)
    model.train()
    with torch.no_grad():
        batch_stats = model.query(particles)[1]
    assert not torch.allclose(negatives, batch_stats, atol=1e-3)  # the mode matters, so the test can fail
