"""A run's features read from its checkpoint alone (RunBackbone) are the loaded method's, bit for bit, for every
method; evaluating linear + kNN does not import PyTorch Lightning; the checkpoint reader's errors name the file."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from probcl.errors import RunError
from probcl.methods import METHODS
from probcl.models.checkpoint import RunBackbone, read_checkpoint
from probcl.runs.loading import load_run

from .helpers import DATA_INFO, build


def _save_like_lightning(model, path) -> None:
    """What Lightning's checkpoint holds that probcl reads: hyper-parameters, weights, loop position."""
    torch.save({"hyper_parameters": dict(model.hparams), "state_dict": model.state_dict(), "epoch": 2}, path)


@pytest.mark.parametrize("method", METHODS.names())
def test_the_checkpoint_backbone_embeds_as_the_method_does(method, tmp_path):
    model = build(method)
    with torch.no_grad():  # running statistics unlike a fresh layer's, so that a backbone that ignored them differs
        for module in model.backbone.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
    path = tmp_path / "last.ckpt"
    _save_like_lightning(model, path)
    images = torch.randint(0, 256, (9, 1, 12, 12), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
    method_features = load_run(path, device="cpu").embed(images)
    backbone = RunBackbone(read_checkpoint(path)).eval()
    assert torch.equal(backbone.embed(images), method_features)
    # another inference batch: the same features to float32 rounding (oneDNN may pick another kernel per shape)
    torch.testing.assert_close(backbone.embed(images, batch_size=4), method_features, rtol=1e-5, atol=1e-6)
    assert backbone.data_info.mean == DATA_INFO["mean"]


def test_a_method_may_not_embed_otherwise():
    from probcl.methods.simclr import SimCLR

    with pytest.raises(TypeError, match="overrides embed_batch"):

        class Odd(SimCLR):
            def embed_batch(self, images: torch.Tensor) -> torch.Tensor:
                return super().embed_batch(images) * 2


def test_checkpoint_errors_name_the_file(tmp_path):
    torch.save({"state_dict": {}}, tmp_path / "foreign.ckpt")
    with pytest.raises(RunError, match=r"foreign\.ckpt is not a probcl checkpoint"):
        read_checkpoint(tmp_path / "foreign.ckpt")
    (tmp_path / "garbage.ckpt").write_bytes(b"not a pickle")
    with pytest.raises(RunError, match=r"cannot read checkpoint .*garbage\.ckpt"):
        read_checkpoint(tmp_path / "garbage.ckpt")
    model = build("simclr")
    saved = {"hyper_parameters": dict(model.hparams), "state_dict": model.state_dict()}
    saved["hyper_parameters"]["config"] = {**saved["hyper_parameters"]["config"], "model": {"width": 8}}
    torch.save(saved, tmp_path / "wider.ckpt")
    with pytest.raises(RunError, match=r"wider\.ckpt: its backbone weights do not match"):
        RunBackbone(read_checkpoint(tmp_path / "wider.ckpt"))


def test_linear_and_knn_evaluation_does_not_import_lightning(tiny_config, tmp_path):
    from probcl.tasks.pretrain import pretrain

    run = pretrain(tiny_config(**{"train.limit_train_batches": 1, "train.monitor_every_n_epochs": 0}))
    code = (
        "import sys, probcl\n"
        f"r = probcl.evaluate({str(run)!r}, suites='linear,knn', device='cpu', max_train=300, report=False, "
        "figures=False)\n"
        "print(sorted(r), [m for m in ('lightning', 'torchmetrics') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[-2] == "['knn', 'linear'] []"
