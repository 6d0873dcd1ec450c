"""model.dropout2d: channel dropout in probcl's own backbones (the TaU paper's MC-dropout baseline), built through
the family builders."""

from __future__ import annotations

import torch
from torch import nn

from probcl.config import ModelConfig
from probcl.models.backbones import InputDropoutConv2d, build_backbone


def test_dropout2d_reaches_every_own_backbone_and_is_absent_by_default():
    cnn = build_backbone(ModelConfig(backbone="cnn", width=8, dropout2d=0.5), in_channels=1)
    resnet = build_backbone(ModelConfig(backbone="resnet18", dropout2d=0.5), in_channels=3)
    drops = [m for m in cnn.modules() if isinstance(m, nn.Dropout2d)]
    assert drops and all(m.p == 0.5 for m in drops)
    wrapped = [m for m in resnet.modules() if isinstance(m, InputDropoutConv2d)]
    assert len(wrapped) == 8 and all(m.dropout.p == 0.5 for m in wrapped)  # conv2 of each of resnet18's 8 blocks
    plain = build_backbone(ModelConfig(backbone="cnn", width=8), in_channels=1)
    assert not any(isinstance(m, nn.Dropout2d) for m in plain.modules())


def test_channel_dropout_acts_in_training_mode_only():
    torch.manual_seed(0)
    cnn = build_backbone(ModelConfig(backbone="cnn", width=8, dropout2d=0.5), in_channels=1)
    x = torch.rand(4, 1, 16, 16)
    cnn.eval()
    assert torch.equal(cnn(x), cnn(x))
    for m in cnn.modules():
        if isinstance(m, nn.Dropout2d):
            m.train()
    assert not torch.equal(cnn(x), cnn(x))
