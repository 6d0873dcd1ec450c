"""The backbone registry: one table of names that config validation, building and `evaluate --weights` share."""

from __future__ import annotations

import pytest
import torch

from probcl.config import ModelConfig
from probcl.core.backbone_names import FAMILIES, backbone_choices, resolve_backbone
from probcl.errors import ConfigError
from probcl.models.backbones import BUILDERS, build_backbone


def test_every_trainable_family_has_a_builder_and_no_builder_lacks_a_family():
    assert {f.name for f in FAMILIES if f.trainable} == set(BUILDERS)


@pytest.mark.parametrize("name", ["cnn", "resnet18", "resnet50"])
def test_own_names_resolve_to_their_family_and_build(name):
    resolved = resolve_backbone(name)
    assert resolved.name == name and name in resolved.family.names
    net = build_backbone(ModelConfig(backbone=name, width=4), 1)
    assert net(torch.zeros(2, 1, 32, 32)).shape == (2, net.out_dim)


def test_prefixes_resolve_and_check_with_their_library():
    pytest.importorskip("timm")
    assert resolve_backbone("timm:resnet10t").family.name == "timm"
    with pytest.raises(ConfigError, match="unknown timm model 'nope'"):
        resolve_backbone("timm:nope")
    assert resolve_backbone("torchvision:resnet18", trainable=False).name == "resnet18"
    with pytest.raises(ConfigError, match="unknown torchvision model 'nope'"):
        resolve_backbone("torchvision:nope", trainable=False)


def test_torchvision_is_for_evaluation_only_and_the_messages_list_what_is_valid():
    assert backbone_choices() == "cnn, resnet18, resnet50 or timm:NAME"
    assert backbone_choices(trainable=False) == "cnn, resnet18, resnet50, timm:NAME or torchvision:NAME"
    with pytest.raises(ConfigError, match=r"must be one of cnn, resnet18, resnet50 or timm:NAME; got 'torchvision:x'"):
        ModelConfig(backbone="torchvision:x")
    with pytest.raises(ConfigError, match=r"got 'resnet19'"):
        resolve_backbone("resnet19", trainable=False)
