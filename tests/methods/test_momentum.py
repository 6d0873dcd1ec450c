"""The base class's EMA over the (online, target) pairs a method declares (MoCo Eq. 2, BYOL Sec. 3.1)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from probcl.config import load_config
from probcl.methods.base import SSLMethod
from probcl.methods.moco import MoCo

from .helpers import DATA_INFO, build


def fill_(module: nn.Module, value: float) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.fill_(value)


@pytest.mark.parametrize(
    "method, args",
    [
        ("moco", {"momentum": 0.9}),
        ("vem-langevin", {"base": "moco", "momentum": 0.75}),
    ],
)
def test_every_declared_pair_gets_exactly_m_target_plus_one_minus_m_online(method, args):
    model = build(method, **args)
    pairs = model.momentum_pairs()
    assert [(online is model.backbone, online is model.projector) for online, _ in pairs] == [
        (True, False),
        (False, True),
    ]
    for i, (online, target) in enumerate(pairs):
        fill_(online, 1.0 + i)  # backbone 1, projector 2
        fill_(target, 5.0)
    model.after_optimizer_step(1)
    m = args["momentum"]
    for i, (online, target) in enumerate(pairs):
        expected = m * 5.0 + (1 - m) * (1.0 + i)  # hand-computed: 0.9*5 + 0.1*1 = 4.6, 0.9*5 + 0.1*2 = 4.7, ...
        for p in target.parameters():
            torch.testing.assert_close(p, torch.full_like(p, expected), rtol=0, atol=1e-6)
        for p in online.parameters():  # the online side is left alone
            assert torch.all(p == 1.0 + i)


def test_buffers_of_the_target_are_copied_from_the_online_network():
    model = build("moco", momentum=0.9)
    online_bn = next(m for m in model.backbone.modules() if isinstance(m, nn.BatchNorm2d))
    target_bn = next(m for m in model.key_encoder.backbone.modules() if isinstance(m, nn.BatchNorm2d))
    with torch.no_grad():
        online_bn.running_mean.fill_(3.0)
    model.after_optimizer_step(1)
    assert torch.all(target_bn.running_mean == 3.0)


def test_methods_without_pairs_change_nothing():
    model = build("simclr")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert model.momentum_pairs() == []
    model.after_optimizer_step(1)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_byol_declares_its_target_networks():
    model = build("byol")
    assert model.momentum_pairs() == [
        (model.backbone, model.target_backbone),
        (model.projector, model.target_projector),
    ]


def test_pairs_without_a_momentum_are_a_clear_error():
    class Declares(SSLMethod):
        def momentum_pairs(self):
            return [(self.backbone, self.backbone)]

    model = Declares(load_config(None, {"model.width": 4}), DATA_INFO)
    with pytest.raises(NotImplementedError, match="must define momentum"):
        model.after_optimizer_step(1)


def test_checkpoints_of_the_old_layout_load_into_the_components():
    model = build("moco", queue_size=16)
    model.key_queue.enqueue(torch.ones(5, 8))
    new = model.state_dict()
    old = {}
    for key, value in new.items():  # the names MoCo used before the key path and queue became components
        key = key.replace("key_encoder.backbone.", "key_backbone.").replace("key_encoder.projector.", "key_projector.")
        old[{"key_queue.queue": "queue", "key_queue.ptr": "queue_ptr"}.get(key, key)] = value
    assert "queue_ptr" in old and any(k.startswith("key_backbone.") for k in old)
    fresh = build("moco", queue_size=16)
    torch.manual_seed(7)
    fill_(fresh, 0.0)
    fresh.load_state_dict(old, strict=True)
    assert int(fresh.key_queue.ptr) == 5
    for key, value in fresh.state_dict().items():
        assert torch.equal(value, new[key]), key
    assert isinstance(fresh, MoCo)
