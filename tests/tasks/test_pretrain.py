"""End-to-end pretraining on a small real subset: checkpoints, exact resume, divergence, load and export."""

import json

import pytest
import torch
from lightning.pytorch.callbacks import Callback

import probcl
from probcl.core.layout import RunPaths
from probcl.methods import TrainingDivergedError
from probcl.tasks.pretrain import pretrain


def test_one_epoch_writes_run_directory(tiny_config):
    cfg = tiny_config()
    root = pretrain(cfg)
    paths = RunPaths(root)
    assert paths.last.exists() and paths.config.exists() and paths.best.exists()
    rows = [json.loads(line) for line in paths.metrics.read_text().splitlines()]
    monitor = [r for r in rows if "monitor/knn_top1" in r]
    assert len(monitor) == 1 and 0 <= monitor[0]["monitor/knn_top1"] <= 100 and monitor[0]["epoch"] == 0
    model = probcl.load(root)
    images = torch.randint(0, 256, (3, 1, 28, 28), dtype=torch.uint8)
    assert model.embed(images).shape == (3, model.feature_dim)
    assert model.checkpoint_meta["global_step"] == 4
    assert not list(paths.checkpoints.glob("*.tmp"))  # atomic writes leave no temporaries


def _final_state(root):
    return torch.load(RunPaths(root).last, map_location="cpu", weights_only=False)["state_dict"]


class Killed(RuntimeError):
    pass


class KillAtEpoch(Callback):
    """Simulates a crash at the start of an epoch (after the previous epoch's checkpoint)."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if trainer.current_epoch == self.epoch:
            raise Killed()


def test_interrupted_run_resumes_exactly(tiny_config):
    full = pretrain(tiny_config(run_name="full", **{"train.epochs": 2}))
    # The same run, killed after its first epoch, then resumed from last.ckpt.
    resumed_cfg = tiny_config(run_name="part", **{"train.epochs": 2})
    with pytest.raises(Killed):
        pretrain(resumed_cfg, callbacks=[KillAtEpoch(1)])
    meta = torch.load(RunPaths(resumed_cfg.run_dir).last, map_location="cpu", weights_only=False)
    assert meta["global_step"] == 4
    pretrain(resumed_cfg)
    final = torch.load(RunPaths(resumed_cfg.run_dir).last, map_location="cpu", weights_only=False)
    assert final["global_step"] == 8
    reference = _final_state(full)
    for name, value in final["state_dict"].items():
        assert torch.equal(value, reference[name]), name


def test_resume_refuses_a_different_config(tiny_config):
    from probcl.config import ConfigError

    pretrain(tiny_config(run_name="r"))
    with pytest.raises(ConfigError, match=r"other settings: model\.width \(saved 4, now 6\)"):
        pretrain(tiny_config(run_name="r", **{"model.width": 6}))
    with pytest.raises(ConfigError, match=r"other settings: optim\.lr .*; train\.batch_size \(saved 32, now 16\)"):
        pretrain(tiny_config(run_name="r", **{"optim.lr": 0.5, "train.batch_size": 16}))


# with the monitor turned off on resume the checkpoint holds a callback this run lacks: pretrain handles Lightning's
# note about it (HANDLED_WARNINGS), so a warning here fails the test
@pytest.mark.filterwarnings("error:Be aware that when using")
def test_resume_accepts_new_runtime_settings_and_records_them(tiny_config):
    """More epochs, checkpoint frequency, the monitor and channels_last do not change what a run learns:
    it resumes (from step 4 to 8) and its config.yaml says what it continued with."""
    import yaml

    pretrain(tiny_config(run_name="r", **{"train.epochs": 1}))
    runtime = {
        "train.epochs": 2,
        "train.checkpoint_every_n_steps": 2,
        "train.monitor_every_n_epochs": 0,
        "train.channels_last": False,
        "data.num_workers": 0,
    }
    paths = RunPaths(pretrain(tiny_config(run_name="r", **runtime)))
    assert torch.load(paths.last, map_location="cpu", weights_only=False)["global_step"] == 8
    saved = yaml.safe_load(paths.config.read_text())
    assert saved["train"]["checkpoint_every_n_steps"] == 2 and saved["train"]["channels_last"] is False
    assert saved["train"]["epochs"] == 2


def test_non_finite_loss_stops_with_message_and_keeps_checkpoint(tiny_config, monkeypatch):
    cfg = tiny_config(run_name="nan")
    pretrain(cfg)
    before = RunPaths(cfg.run_dir).last.read_bytes()
    from probcl.methods import simclr

    real = simclr.simclr_loss
    monkeypatch.setattr(simclr, "simclr_loss", lambda *a, **k: real(*a, **k) * float("nan"))
    with pytest.raises(TrainingDivergedError, match="loss became nan.*The last good checkpoint is kept in"):
        pretrain(tiny_config(run_name="nan", **{"train.epochs": 2}))
    assert RunPaths(cfg.run_dir).last.read_bytes() == before
    rows = RunPaths(cfg.run_dir).metrics.read_text().splitlines()
    assert "NaN" not in "".join(rows) and all(json.loads(row, parse_constant=_strict) for row in rows)


def _strict(constant: str):
    raise ValueError(f"{constant} is not JSON")  # what jq or a browser's JSON.parse say of NaN / Infinity


def test_a_run_that_diverges_before_its_first_checkpoint_says_there_is_none(tiny_config, monkeypatch):
    from probcl.methods import simclr

    real = simclr.simclr_loss
    monkeypatch.setattr(simclr, "simclr_loss", lambda *a, **k: real(*a, **k) * float("inf"))
    cfg = tiny_config(run_name="inf-first")
    with pytest.raises(TrainingDivergedError, match="loss became inf.*before its first checkpoint") as error:
        pretrain(cfg)
    assert "kept in" not in str(error.value) and not RunPaths(cfg.run_dir).last.exists()


def test_export_loads_into_torchvision_resnet(tiny_config, tmp_path):
    import torchvision
    from safetensors.torch import load_file

    from probcl.tasks.export import export_backbone

    cfg = tiny_config(
        run_name="resnet",
        **{
            "model.backbone": "resnet18",
            "model.cifar_stem": False,
            "train.limit_train_batches": 1,
            "train.batch_size": 4,
            "train.monitor_every_n_epochs": 0,
        },
    )
    root = pretrain(cfg)
    out = export_backbone(root)
    state = load_file(out)
    net = torchvision.models.resnet18()
    net.conv1 = torch.nn.Conv2d(1, 64, 7, 2, 3, bias=False)
    missing, unexpected = net.load_state_dict(state, strict=False)
    assert set(missing) == {"fc.weight", "fc.bias"} and not unexpected
    net.fc = torch.nn.Identity()
    model = probcl.load(root)
    x = torch.randint(0, 256, (2, 1, 28, 28), dtype=torch.uint8)
    net.eval().to(memory_format=model.memory_format)  # the run trains channels_last: compare like with like
    assert torch.allclose(
        net(model.normalizer(x).contiguous(memory_format=model.memory_format)), model.embed(x), atol=1e-5
    )
    assert json.loads((out.parent / "config.json").read_text())["feature_dim"] == 512


def test_seeded_runs_are_deterministic(tiny_config):
    a = _final_state(pretrain(tiny_config(run_name="a")))
    b = _final_state(pretrain(tiny_config(run_name="b")))
    assert all(torch.equal(a[k], b[k]) for k in a)
