"""ONNX export of every backbone the presets build (issue #29, finding 1): each FMNIST, MNIST, CIFAR preset's model
and the README's timm backbone, randomly initialised, exported and run in onnxruntime, gives ``embed``'s features;
an export that fails is one line, with nothing of the exporter's graph dump, and leaves config.json naming only
files that exist."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml
from torch import nn

from probcl.config import load_config
from probcl.core.presets import PRESETS_DIR
from probcl.data.info import DataInfo
from probcl.errors import RunError
from probcl.methods import METHODS
from probcl.models.pretrained import BACKBONE_FIELDS
from probcl.tasks.export import export_model

onnxruntime = pytest.importorskip("onnxruntime")

NATIVE_INPUT = {
    "fashion-mnist": (1, 28),
    "mnist": (1, 28),
    "digits": (1, 28),  # 8x8, upscaled to 28 px when loaded
    "cifar10": (3, 32),
    "cifar100": (3, 32),
}  # C, size
README_TIMM = ("fashion-mnist/simclr", "timm:resnet10t")  # README: --model.backbone timm:resnet10t


def preset_backbones() -> dict[tuple, str]:
    """One entry per distinct (backbone fields, input) among the pretraining presets (benchmark grids excluded:
    their cells use these presets' models), plus the README's timm backbone: {key: the first preset with it}."""
    found: dict[tuple, str] = {}
    for path in sorted(PRESETS_DIR.rglob("*.yaml")):
        if "method" not in yaml.safe_load(path.read_text()):
            continue
        cfg = load_config(path, {"init": None})
        channels, size = NATIVE_INPUT[cfg.data.dataset]
        model = tuple((k, getattr(cfg.model, k)) for k in BACKBONE_FIELDS)
        found.setdefault(
            (model, channels, cfg.data.image_size or size), str(path.relative_to(PRESETS_DIR).with_suffix(""))
        )
    preset, backbone = README_TIMM
    cfg = load_config(PRESETS_DIR / f"{preset}.yaml", {"model.backbone": backbone})
    model = tuple((k, getattr(cfg.model, k)) for k in BACKBONE_FIELDS)
    found[(model, *NATIVE_INPUT[cfg.data.dataset])] = f"{preset} --model.backbone {backbone}"
    return found


BACKBONES = preset_backbones()


def random_model(model: tuple, channels: int, size: int):
    """SimCLR (the method does not change the backbone) with the preset's backbone, randomly initialised, its
    BatchNorm statistics moved off their initial values by two training-mode passes."""
    torch.manual_seed(0)
    cfg = load_config(None, {"method": "simclr", **{f"model.{k}": v for k, v in model}})
    mean, std = [0.3 + 0.1 * c for c in range(channels)], [0.2 + 0.05 * c for c in range(channels)]
    method = METHODS.get("simclr")(cfg, DataInfo("preset", channels, size, 10, mean, std))
    with torch.no_grad():
        for _ in range(2):
            method.train().embed_batch(torch.randint(0, 256, (8, channels, size, size), dtype=torch.uint8))
    method.checkpoint_meta = {"path": None, "epoch": 0, "global_step": 0}  # config.json's source: no checkpoint
    return method.eval()


def test_every_preset_backbone_is_in_the_list():
    names = {model[0][1] for model, _, _ in BACKBONES}
    assert {"cnn", "resnet18", "resnet50", "timm:resnet10t"} <= names
    pools = {dict(model)["pool"] for model, _, _ in BACKBONES if dict(model)["backbone"] == "cnn"}
    assert 2 in pools  # the FMNIST default (28 px -> 7x7 map -> 2x2 grid) that failed before


@pytest.mark.parametrize("key", list(BACKBONES), ids=list(BACKBONES.values()))
def test_preset_backbone_runs_in_onnxruntime_as_embed(key, tmp_path):
    model, channels, size = key
    method = random_model(model, channels, size)
    out = export_model(method, tmp_path, "onnx")
    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    images = torch.randint(0, 256, (3, channels, size, size), dtype=torch.uint8, generator=torch.Generator())
    features = session.run(None, {"images": (images.float() / 255).numpy()})[0]
    expected = method.embed(images).numpy()
    assert features.shape == expected.shape == (3, method.feature_dim)
    assert np.abs(features - expected).max() < 1e-4
    config = json.loads((tmp_path / "config.json").read_text())
    assert all((tmp_path / name).is_file() for name in config["files"].values())


def test_a_failed_export_is_one_line_and_keeps_the_folder_consistent(tmp_path, capfd):
    """nn.AdaptiveAvgPool2d(2) on the 7x7 map is what every FMNIST preset exported before: torch's exporter
    refuses it after printing its whole graph."""
    method = random_model((("backbone", "cnn"), ("width", 4), ("pool", 2)), 1, 28)
    export_model(method, tmp_path, "safetensors")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    method.backbone.pool = nn.AdaptiveAvgPool2d(2)
    capfd.readouterr()
    with pytest.raises(RunError) as failure:
        export_model(method, tmp_path, "onnx")
    message = str(failure.value)
    assert "\n" not in message and "adaptive_avg_pool2d" in message and "--format safetensors" in message
    printed = capfd.readouterr()
    assert printed.out == "" and printed.err == ""  # no "Torch IR graph at exception" dump
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # untouched: no model.onnx named
