"""`probcl export`: model.safetensors + config.json (+ model.onnx) that run outside probcl: the ONNX graph in
onnxruntime and the folder through ``probcl.load`` give the run's features; bad input gets one clear error."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch
from conftest import tiny_overrides
from safetensors.torch import load_file

import probcl
from probcl.cli import main
from probcl.config import load_config
from probcl.data.loaders import load_dataset
from probcl.errors import ConfigError, ProbclError, RunError
from probcl.models.pretrained import describe_pretrained
from probcl.tasks.export import export_backbone
from probcl.tasks.pretrain import pretrain


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """SimCLR, CNN width 8, 4 steps on scikit-learn's digits."""
    root = tmp_path_factory.mktemp("export")
    return pretrain(load_config(None, tiny_overrides(root / "simclr", **{"model.width": 8})))


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", "test").images[:9]


def by_hand(run, images: torch.Tensor) -> torch.Tensor:
    """The run's backbone on (images / 255 - mean) / std, computed here from the checkpoint's numbers."""
    model = probcl.load(run, device="cpu")
    mean = torch.tensor(model.data_info.mean).view(1, -1, 1, 1)
    std = torch.tensor(model.data_info.std).view(1, -1, 1, 1)
    with torch.no_grad():
        return model.backbone((images.float() / 255 - mean) / std)


def test_onnx_graph_runs_in_onnxruntime_with_any_batch_size(run, digits, tmp_path):
    import onnxruntime

    out = export_backbone(run, tmp_path / "exp", "onnx")
    assert out == tmp_path / "exp" / "model.onnx"
    assert sorted(p.name for p in out.parent.iterdir()) == ["config.json", "model.onnx", "model.safetensors"]
    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (given,), (produced,) = session.get_inputs(), session.get_outputs()
    assert (given.name, produced.name) == ("images", "features") and isinstance(given.shape[0], str)
    expected = by_hand(run, digits)
    for n in (1, 9):  # the batch axis is dynamic
        features = session.run(None, {"images": (digits[:n].float() / 255).numpy()})[0]
        assert features.shape == (n, expected.shape[1])
        assert np.abs(features - expected[:n].numpy()).max() < 1e-4


def test_the_export_folder_loads_back_with_its_preprocessing(run, digits, tmp_path):
    out = export_backbone(run, tmp_path / "exp")
    folder = out.parent
    model = probcl.load(run, device="cpu")
    config = json.loads((folder / "config.json").read_text())
    assert config["method"] == "simclr" and config["probcl_version"] == probcl.__version__
    assert config["model"] == {
        "backbone": "cnn",
        "width": 8,
        "pool": 1,
        "norm": "bn",
        "act": "relu",
        "cifar_stem": True,
    }
    assert (config["in_channels"], config["image_size"], config["feature_dim"]) == (1, 28, model.feature_dim)
    assert config["normalization"] == {"mean": model.data_info.mean, "std": model.data_info.std}
    state = load_file(out)
    assert state.keys() == model.backbone.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in model.backbone.state_dict().items())

    expected = by_hand(run, digits)
    torch.testing.assert_close(model.embed(digits), expected, atol=1e-5, rtol=1e-5)
    for given in (folder, out, folder / "config.json", str(folder)):
        exported = probcl.load(given, device="cpu")
        z = exported.embed(digits, batch_size=4)
        assert z.grad_fn is None
        torch.testing.assert_close(z, expected, atol=1e-5, rtol=1e-5)
    source = describe_pretrained(str(folder), "tau-posthoc")  # --init takes the folder too
    assert source.path == out and source.model == config["model"] and source.channels == 1


def test_pt_format_and_a_later_export_replaces_the_earlier_files(run, digits, tmp_path):
    folder = tmp_path / "exp"
    export_backbone(run, folder, "onnx")
    out = export_backbone(run, folder, "pt")
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.pt"]  # no stale ONNX / safetensors
    state = torch.load(out, weights_only=True)
    assert all(torch.equal(state[k], v) for k, v in probcl.load(run, device="cpu").backbone.state_dict().items())
    torch.testing.assert_close(
        probcl.load(folder, device="cpu").embed(digits), by_hand(run, digits), atol=1e-5, rtol=1e-5
    )
    single = export_backbone(run, tmp_path / "w.safetensors")  # a file name: that file and w.json
    assert single == tmp_path / "w.safetensors" and (tmp_path / "w.json").is_file()
    torch.testing.assert_close(
        probcl.load(single, device="cpu").embed(digits), by_hand(run, digits), atol=1e-5, rtol=1e-5
    )


def test_cli_writes_the_default_folder(run, capsys):
    assert export_backbone(run / "checkpoints" / "last.ckpt") == run / "export" / "model.safetensors"
    assert main(["export", str(run), "--format", "onnx"]) == 0
    assert "model.onnx" in capsys.readouterr().out
    assert {"config.json", "model.onnx", "model.safetensors"} <= {p.name for p in (run / "export").iterdir()}


def test_bad_input_gets_one_clear_error(run, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "exp"
    out = export_backbone(run, folder)
    (folder / "config.json").unlink()
    with pytest.raises(ProbclError, match="config.json"):
        probcl.load(folder)
    with pytest.raises(RunError, match="does not exist"):
        probcl.load(tmp_path / "nowhere")
    onnx = export_backbone(run, tmp_path / "g", "onnx")
    with pytest.raises(RunError, match="ONNX graph: run it with onnxruntime"):
        probcl.load(onnx)
    with pytest.raises(RunError, match="exported backbone, not a run"):
        from probcl.runs.loading import load_run

        load_run(out.parent)
    with pytest.raises(ConfigError, match="does not fit --format onnx"):
        export_backbone(run, tmp_path / "w.safetensors", "onnx")
    monkeypatch.setitem(sys.modules, "onnx", None)  # `import onnx` fails as on a machine without it
    assert main(["export", str(run), "--format", "onnx", "--out", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install 'probcl[onnx]'" in err
    assert not (tmp_path / "none").exists()


def test_an_export_never_replaces_another_commands_file_and_a_new_dotted_name_is_a_folder(run, tmp_path):
    """``--out X.safetensors`` writes its config to X.json: over a run's eval.json that would lose the evaluation
    results, so a X.json that is not an export's config is refused before anything is written; an earlier
    export's is replaced. A name with another suffix is a folder (its files inside), as the help says."""
    results = tmp_path / "eval.json"
    results.write_text('{"knn": {"top1": 80.0}}')
    with pytest.raises(ConfigError, match="holds something else"):
        export_backbone(run, tmp_path / "eval.safetensors")
    assert results.read_text() == '{"knn": {"top1": 80.0}}' and not (tmp_path / "eval.safetensors").exists()
    assert export_backbone(run, tmp_path / "w.safetensors") == tmp_path / "w.safetensors"
    assert export_backbone(run, tmp_path / "w.safetensors") == tmp_path / "w.safetensors"  # its own config: again
    assert export_backbone(run, tmp_path / "v1.txt") == tmp_path / "v1.txt" / "model.safetensors"
    assert json.loads((tmp_path / "v1.txt" / "config.json").read_text())["files"] == {"weights": "model.safetensors"}
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match="afile is a file, not a folder"):
        export_backbone(run, tmp_path / "afile" / "w.safetensors")
