"""timm backbones (``--model.backbone timm:<name>``): config validation, feature width, a two-step pretrain on
digits, and the same encoder evaluated as a run and as exported weights."""

from __future__ import annotations

import json
import sys

import pytest
import timm  # in the dev extra (the `timm` extra for users)
import torch

import probcl
from probcl.cli import main
from probcl.config import ModelConfig, from_dict, load_config
from probcl.errors import ConfigError
from probcl.models.backbones import build_backbone
from probcl.models.encoder import load_encoder


def test_config_accepts_timm_names_and_rejects_unknown_ones():
    assert from_dict(ModelConfig, {"backbone": "timm:resnet10t"}, "model").backbone == "timm:resnet10t"
    with pytest.raises(ConfigError, match="model.backbone: unknown timm model 'resnet_nope'; see timm.list_models"):
        from_dict(ModelConfig, {"backbone": "timm:resnet_nope"}, "model")
    with pytest.raises(ConfigError, match=r"model\.backbone must be one of cnn, resnet18, resnet50 or timm:NAME"):
        from_dict(ModelConfig, {"backbone": "vgg"}, "model")
    with pytest.raises(ConfigError, match="timm:resnet10t keeps its own layers"):
        from_dict(ModelConfig, {"backbone": "timm:resnet10t", "norm": "none"}, "model")
    own = r"model\.dropout2d applies to probcl's own backbones \(cnn, resnet18, resnet50\)"
    with pytest.raises(ConfigError, match=own):
        from_dict(ModelConfig, {"backbone": "timm:resnet10t", "dropout2d": 0.5}, "model")


def test_without_timm_one_line_says_how_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "timm", None)  # `import timm` now raises ImportError
    with pytest.raises(ConfigError, match=r"^model.backbone timm:resnet10t needs timm: pip install probcl\[timm\]$"):
        load_config(None, {"model.backbone": "timm:resnet10t"})
    assert main(["pretrain", "--dataset", "digits", "--model.backbone", "timm:resnet10t"]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "probcl: config error: model.backbone timm:resnet10t needs timm: pip install probcl[timm]"
    )


def test_feature_width_is_what_the_model_outputs():
    """MobileNetV3's pooled output (1024 after its head conv) is wider than timm's ``num_features`` (288)."""
    net = build_backbone(ModelConfig(backbone="timm:mobilenetv3_small_050"), in_channels=1)
    reference = timm.create_model("mobilenetv3_small_050", pretrained=False, num_classes=0, in_chans=1).eval()
    with torch.no_grad():
        width = reference(torch.zeros(2, 1, 28, 28)).shape[1]
    assert net.out_dim == width == 1024 and reference.num_features == 288
    assert net.training  # built in train mode, like every backbone


def test_timm_checkpoint_with_its_head_loads_as_an_encoder(tmp_path):
    torch.manual_seed(0)
    full = timm.create_model("resnet10t", pretrained=False, in_chans=1).eval()  # 1000-class head "fc"
    path = tmp_path / "resnet10t.pth"
    torch.save(full.state_dict(), path)
    encoder = load_encoder(path, "digits", {"backbone": "timm:resnet10t"}, mean=[0.5], std=[0.25]).eval()
    x = torch.randint(0, 256, (4, 1, 28, 28), dtype=torch.uint8)
    with torch.no_grad():
        expected = full.forward_head(full.forward_features((x.float() / 255 - 0.5) / 0.25), pre_logits=True)
        assert torch.allclose(encoder.embed(x), expected, atol=1e-5)


def test_two_step_pretrain_then_evaluate_as_run_and_as_exported_weights(tiny_config, tmp_path):
    from probcl.tasks.evaluate import EvaluateSettings, evaluate_run
    from probcl.tasks.export import export_backbone
    from probcl.tasks.pretrain import pretrain

    cfg = tiny_config(
        run_name="timm",
        **{
            "model.backbone": "timm:resnet10t",
            "train.limit_train_batches": 2,
            "train.batch_size": 8,
            "train.monitor_every_n_epochs": 0,
        },
    )
    root = pretrain(cfg)
    model = probcl.load(root, device="cpu")  # a non-finite loss would have stopped the run with an error
    assert model.checkpoint_meta["global_step"] == 2
    reference = timm.create_model("resnet10t", pretrained=False, num_classes=0, in_chans=1).eval()
    reference.load_state_dict(model.backbone.state_dict())
    x = torch.randint(0, 256, (4, 1, 28, 28), dtype=torch.uint8)
    with torch.no_grad():
        assert torch.allclose(model.embed(x), reference(model.normalizer(x)), atol=1e-5)

    flags = ["--max-train", "200", "--device", "cpu"]
    run = evaluate_run(root, ["knn"], EvaluateSettings(device="cpu", max_train=200, figures=False))["knn"]
    weights = export_backbone(root)  # + .json sidecar: architecture, channels, size, normalisation
    out = tmp_path / "exported-eval"
    assert (
        main(
            [
                "evaluate",
                "--weights",
                str(weights),
                "--dataset",
                "digits",
                "--suite",
                "knn",
                "--out",
                str(out),
                "--no-report",
                "--precision",
                "32-true",  # the run's own (tiny configs pin it); --weights would take auto, bf16 on some CPUs
                *flags,
            ]
        )
        == 0
    )
    foreign = json.loads((out / "eval.json").read_text())["knn"]
    assert foreign["protocol"]["checkpoint"]["backbone"] == "timm:resnet10t"
    assert (foreign["top1"], foreign["plain_top1"]) == pytest.approx((run["top1"], run["plain_top1"]), abs=1e-9)
