"""docs/adding-a-method.md's example, executed: it trains, resumes, evaluates and declares its uncertainty."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_overrides

import probcl
from probcl.config import load_config
from probcl.errors import ConfigError
from probcl.methods import METHODS
from probcl.methods.capabilities import HasUncertainty
from probcl.tasks.evaluate import EvaluateSettings, evaluate_run
from probcl.tasks.pretrain import pretrain

DOC = Path(__file__).resolve().parents[2] / "docs" / "adding-a-method.md"
NAME = "barlow-twins-example"


@pytest.fixture(scope="module")
def barlow_twins():
    """The class defined by the document's code block, registered while the tests run."""
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    assert len(code.splitlines()) <= 60, "the worked example should stay under ~60 lines"
    module = types.ModuleType("barlow_twins_example")  # as if it were probcl/methods/barlow_twins.py
    sys.modules[module.__name__] = module
    exec(compile(code, str(DOC), "exec", dont_inherit=True), module.__dict__)
    yield module.BarlowTwins
    METHODS.unregister(NAME)
    del sys.modules[module.__name__]


def barlow_twins_loss_numpy(z1: np.ndarray, z2: np.ndarray, lambd: float, eps: float) -> float:
    """Barlow Twins Eq. 1 written out element by element (float64)."""

    def standardise(z):
        return (z - z.mean(0)) / (z.std(0, ddof=1) + eps)

    a, b = standardise(z1), standardise(z2)
    n, d = a.shape
    loss = 0.0
    for i in range(d):
        for j in range(d):
            c_ij = sum(a[k, i] * b[k, j] for k in range(n)) / n
            loss += (1 - c_ij) ** 2 if i == j else lambd * c_ij**2
    return loss


def test_the_example_loss_is_barlow_twins_eq_1(barlow_twins, tmp_path):
    cfg = load_config(None, tiny_overrides(tmp_path / "bt", method=NAME, **{"model.proj_out": 6}))
    info = {"dataset": "digits", "channels": 1, "image_size": 28, "num_classes": 10, "mean": [0.5], "std": [0.5]}
    model = barlow_twins(cfg, info).double()
    torch.manual_seed(0)
    v1, v2 = torch.randn(2, 12, 1, 28, 28, dtype=torch.float64)
    out = model.step(v1, v2, None)
    with torch.no_grad():
        z1, z2 = (model.projector(model.backbone(v)).numpy() for v in (v1, v2))
    assert out.loss.item() == pytest.approx(barlow_twins_loss_numpy(z1, z2, 5e-3, 1e-5), rel=1e-9)


def test_the_example_trains_resumes_and_is_evaluated(barlow_twins, tmp_path):
    overrides = tiny_overrides(tmp_path / "bt", method=NAME, **{"train.epochs": 2})
    run = pretrain(load_config(None, overrides))
    model = probcl.load(run, device="cpu")
    assert isinstance(model, barlow_twins) and isinstance(model, HasUncertainty)
    images = torch.randint(0, 256, (5, 1, 28, 28), dtype=torch.uint8)
    with torch.no_grad():
        expected = model.project(images).norm(dim=1)
        torch.testing.assert_close(model.uncertainty(images), expected)
    # a third epoch resumes from the checkpoint of the second
    more = pretrain(load_config(None, {**overrides, "train.epochs": 3}))
    assert torch.load(Path(more) / "checkpoints" / "last.ckpt", weights_only=False)["epoch"] == 2
    results = evaluate_run(run, ["linear", "knn"], EvaluateSettings(device="cpu", figures=False))
    assert 0 <= results["linear"]["top1"] <= 100 and 0 <= results["knn"]["top1"] <= 100


def test_the_example_bounds_are_checked(barlow_twins, tmp_path):
    cfg = load_config(None, tiny_overrides(tmp_path / "bt", method=NAME, **{"method_args.lambd": -1.0}))
    with pytest.raises(ConfigError, match=r"method_args.lambd must be > 0"):
        pretrain(cfg)
    assert not (tmp_path / "bt").exists()  # stopped before any work
