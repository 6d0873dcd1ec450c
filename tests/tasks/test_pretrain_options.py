"""Speed options change how the work is laid out, never its result: channels_last against NCHW,
the pooled-grid CNN features against hand-computed bins, and the online monitor's logged cost."""

from __future__ import annotations

import copy
import json

import torch

from probcl.config import load_config
from probcl.core.layout import RunPaths
from probcl.models.backbones import SmallCNN
from probcl.tasks.pretrain import pretrain


def test_channels_last_gives_the_nchw_forward_and_gradients():
    torch.manual_seed(0)
    reference = SmallCNN(1, 8).train()
    nhwc = copy.deepcopy(reference).to(memory_format=torch.channels_last)
    x = torch.randn(16, 1, 28, 28)
    out_ref, out = reference(x), nhwc(x.contiguous(memory_format=torch.channels_last))
    out_ref.square().sum().backward()
    out.square().sum().backward()
    torch.testing.assert_close(out, out_ref, rtol=1e-4, atol=1e-5)
    for (name, p_ref), p in zip(reference.named_parameters(), nhwc.parameters()):
        # summation order differs between the layouts (and with the thread count): compare in norm; a wrong layout
        # is off by O(1)
        assert (p.grad - p_ref.grad).norm() <= 3e-4 * p_ref.grad.norm(), name


def test_methods_train_in_the_configured_memory_format(tiny_config):
    from dataclasses import asdict

    from probcl.data.info import data_info_for
    from probcl.data.loaders import load_dataset
    from probcl.methods import METHODS

    for channels_last, expected in ((True, torch.channels_last), (False, torch.contiguous_format)):
        cfg = tiny_config(**{"train.channels_last": channels_last})
        info = asdict(data_info_for(cfg, load_dataset("digits", "train")))
        model = METHODS.get("simclr")(cfg.to_dict(), info)
        conv = model.backbone.features[3]  # second conv: 4 -> 8 channels, where the layouts differ
        assert conv.weight.is_contiguous(memory_format=expected)
        view1, view2 = model.training_views(torch.randint(0, 256, (4, 1, 28, 28), dtype=torch.uint8))
        assert view1.is_contiguous(memory_format=expected) and view2.is_contiguous(memory_format=expected)


def test_pooled_grid_features_are_the_means_of_the_adaptive_bins():
    torch.manual_seed(0)
    net = SmallCNN(1, 4, pool=2).eval()
    x = torch.randn(3, 1, 28, 28)
    fmap = net.features(x)  # (3, 16, 7, 7); adaptive 2x2 bins of 7: rows/cols [0, 4) and [3, 7)
    bins = [(0, 4), (3, 7)]
    expected = torch.stack([fmap[:, :, r0:r1, c0:c1].mean((2, 3)) for r0, r1 in bins for c0, c1 in bins], dim=2)
    assert net.out_dim == 16 * 4
    torch.testing.assert_close(net(x), expected.flatten(1))


def test_monitor_logs_its_cost(tmp_path):
    from conftest import tiny_overrides

    cfg = load_config(None, tiny_overrides(tmp_path / "run", **{"train.epochs": 2}))
    rows = [json.loads(line) for line in RunPaths(pretrain(cfg)).metrics.read_text().splitlines()]
    monitor = [r for r in rows if "monitor/seconds" in r]
    assert len(monitor) == 2
    for row in monitor:
        assert row["monitor/seconds"] > 0 and 0 < row["monitor/share"] < 1
