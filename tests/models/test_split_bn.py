"""Split BatchNorm against separate nn.BatchNorm modules, one per sub-batch (the S-GPU behaviour it simulates)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from probcl.errors import ConfigError
from probcl.models.split_bn import SplitBatchNorm, split_batchnorm_


@pytest.mark.parametrize("shape", [(12, 3, 5, 5), (12, 3)])
def test_training_mode_normalises_each_group_like_its_own_batchnorm(shape):
    torch.manual_seed(0)
    x = torch.randn(*shape) * 3 + 1
    bn = nn.BatchNorm2d(3) if len(shape) == 4 else nn.BatchNorm1d(3)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 2)
        bn.bias.uniform_(-1, 1)
    split = split_batchnorm_(nn.Sequential(copy.deepcopy(bn)), 3)[0]
    assert isinstance(split, SplitBatchNorm)
    groups = [copy.deepcopy(bn) for _ in range(3)]  # three "GPUs", each with its own BN and 4 samples
    expected = torch.cat([g(chunk) for g, chunk in zip(groups, x.chunk(3))])
    torch.testing.assert_close(split(x), expected)
    torch.testing.assert_close(split.running_mean, torch.stack([g.running_mean for g in groups]).mean(0))
    torch.testing.assert_close(split.running_var, torch.stack([g.running_var for g in groups]).mean(0))
    split.eval()
    torch.testing.assert_close(split(x), _eval_bn(bn, split)(x))  # eval mode: plain BatchNorm, running stats
    assert set(split.state_dict()) == set(bn.state_dict())  # checkpoints keep BatchNorm's layout


def _eval_bn(like: nn.Module, split: SplitBatchNorm) -> nn.Module:
    plain = like.__class__(split.num_features)
    plain.load_state_dict(split.state_dict())
    return plain.eval()


def test_a_sample_does_not_see_samples_outside_its_group():
    torch.manual_seed(0)
    net = split_batchnorm_(nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU()), 4).train()
    x = torch.randn(16, 1, 6, 6)
    y = x.clone()
    y[4:] = torch.randn(12, 1, 6, 6)  # change every sample outside sample 0's group (samples 0-3)
    torch.testing.assert_close(net(x)[:4], net(y)[:4])
    y[1] += 1.0  # a group-mate does change it: the statistics are per group
    assert not torch.allclose(net(x)[0], net(y)[0])


def test_a_batch_not_divisible_by_the_groups_is_a_config_error():
    bn = SplitBatchNorm(2, 4).train()
    with pytest.raises(ConfigError, match="divisible"):
        bn(torch.randn(6, 2))
