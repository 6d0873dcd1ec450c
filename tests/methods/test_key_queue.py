"""KeyQueue (MoCo's dictionary) and the momentum key encoder as components."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from probcl.errors import ConfigError
from probcl.methods.components import KeyQueue, MomentumKeyEncoder


def test_queue_buffers_start_as_unit_vectors_at_slot_zero():
    queue = KeyQueue(6, 3)
    assert dict(queue.named_buffers()).keys() == {"queue", "ptr"}
    torch.testing.assert_close(queue.queue.norm(dim=1), torch.ones(6))
    assert int(queue.ptr) == 0


def test_queue_is_fifo_and_wraps_around():
    queue = KeyQueue(5, 2)
    for b in range(4):  # batches of 2 keys with ids 10b, 10b + 1
        queue.enqueue(torch.tensor([[10.0 * b, 0.0], [10.0 * b + 1, 0.0]]))
    # By hand: batch 0 -> slots 0, 1; batch 1 -> 2, 3; batch 2 -> 4, 0; batch 3 -> 1, 2; pointer at 3.
    assert queue.queue[:, 0].tolist() == [21.0, 30.0, 31.0, 11.0, 20.0]
    assert int(queue.ptr) == 3


def test_snapshot_is_not_changed_by_a_later_enqueue():
    queue = KeyQueue(4, 2)
    snapshot = queue.snapshot()
    original = snapshot.clone()
    queue.enqueue(torch.zeros(2, 2))
    assert torch.equal(snapshot, original) and not torch.equal(queue.queue, original)


def test_a_batch_larger_than_the_queue_is_a_config_error():
    with pytest.raises(ConfigError, match="queue_size=3"):
        KeyQueue(3, 2).enqueue(torch.zeros(4, 2))


def test_key_encoder_is_a_frozen_copy_that_gives_normalized_keys_without_gradient():
    torch.manual_seed(0)
    backbone, projector = nn.Linear(4, 6), nn.Linear(6, 3)
    encoder = MomentumKeyEncoder(backbone, projector, shuffle_bn=True)
    assert encoder.backbone is not backbone and all(not p.requires_grad for p in encoder.parameters())
    x = torch.randn(5, 4, requires_grad=True)
    keys = encoder(x)
    assert not keys.requires_grad
    torch.testing.assert_close(keys, F.normalize(projector(backbone(x)), dim=1).detach())


def test_one_process_shuffle_bn_normalizes_each_key_with_its_shuffled_sub_batch_only():
    """MoCo Sec. 3.3 on one process: the key batch is shuffled and BatchNorm statistics are taken per group of
    n / S shuffled samples; reference: one plain BatchNorm per group, computed by hand."""
    from probcl.methods.components import split_groups

    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU())
    projector = nn.Linear(6, 3)
    encoder = MomentumKeyEncoder(backbone, projector, shuffle_bn=True, bn_splits=4).train()
    x = torch.randn(16, 4)
    torch.manual_seed(7)
    keys = encoder(x)
    torch.manual_seed(7)
    order = torch.randperm(16)
    reference = torch.empty(16, 3)
    plain = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU()).train()
    plain.load_state_dict(backbone.state_dict())
    with torch.no_grad():
        for group in order.view(4, 4):  # 4 groups of 4 shuffled samples, each normalized on its own
            reference[group] = F.normalize(projector(plain(x[group])), dim=1)
    torch.testing.assert_close(keys, reference, rtol=1e-5, atol=1e-6)
    other_group = order.view(4, 4)[1]
    changed = x.clone()
    changed[other_group] = 5 * torch.randn(4, 4)  # samples outside the first group change (not a shift)
    torch.manual_seed(7)
    first = order.view(4, 4)[0]
    torch.testing.assert_close(encoder(changed)[first], keys[first], rtol=1e-5, atol=1e-6)
    torch.manual_seed(7)
    assert not torch.allclose(encoder(changed)[other_group], keys[other_group], atol=1e-3)
    with torch.no_grad():
        full = F.normalize(projector(plain(x)), dim=1)
    assert not torch.allclose(keys, full, atol=1e-3)  # differs from one BatchNorm over the whole batch
    assert [split_groups(n, 8) for n in (256, 12, 7, 2, 1)] == [8, 6, 1, 1, 1]
