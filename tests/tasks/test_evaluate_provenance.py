"""Results are never merged across models (issue #29, finding 2): every eval.json result records the sha256 of
the file it measured and its preprocessing; other weights go to their own folder (or are refused in one already
holding results), and a run's results of an earlier checkpoint are moved out of eval.json."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from conftest import tiny_overrides
from safetensors.torch import save_file

from probcl.cli import main
from probcl.config import load_config
from probcl.eval.provenance import legacy_same_run, same_model
from probcl.models.backbones import SmallCNN
from probcl.tasks.evaluate import EvaluateSettings, evaluate_run
from probcl.tasks.pretrain import pretrain

FAST = ["--device", "cpu", "--max-train", "200", "--no-report"]
WEIGHTS = ["--model.backbone", "cnn", "--model.width", "4", "--dataset", "digits"]


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def recorded(folder, suite: str) -> dict:
    return json.loads((folder / "eval.json").read_text())[suite]["protocol"]["checkpoint"]


@pytest.fixture
def two_weights(tmp_path):
    """Two different small-CNN state_dicts, both named model.safetensors (as two `probcl export` folders)."""
    files = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        path = tmp_path / f"export-{seed}" / "model.safetensors"
        path.parent.mkdir()
        save_file({k: v.contiguous() for k, v in SmallCNN(1, 4).state_dict().items()}, str(path))
        files.append(path)
    return files


def test_other_weights_go_to_their_own_folder(two_weights, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    first, second = two_weights
    assert main(["evaluate", "--weights", str(first), *WEIGHTS, "--suite", "linear", *FAST]) == 0
    assert main(["evaluate", "--weights", str(second), *WEIGHTS, "--suite", "knn", *FAST]) == 0
    folders = sorted((tmp_path / "runs").iterdir())
    assert len(folders) == 2 and all(f.name.startswith("eval-model-") for f in folders)
    by_file = {}
    for folder in folders:
        (suite,) = json.loads((folder / "eval.json").read_text())  # one suite each: nothing merged
        record = recorded(folder, suite)
        by_file[record["weights"]] = (suite, record)
    assert by_file.keys() == {str(first), str(second)}
    for path, suite in ((first, "linear"), (second, "knn")):
        got_suite, record = by_file[str(path)]
        assert got_suite == suite and record["sha256"] == sha256(path)
        assert record["preprocessing"]["dataset"] == "digits" and record["preprocessing"]["channels"] == 1
    out = capsys.readouterr().out
    assert all(f"results merged into {f.relative_to(tmp_path) / 'eval.json'}" in out for f in folders)


def test_a_folder_holding_other_weights_is_refused(two_weights, tmp_path, capsys):
    first, second = two_weights
    out = tmp_path / "shared"
    assert main(["evaluate", "--weights", str(first), *WEIGHTS, "--suite", "linear", "--out", str(out), *FAST]) == 0
    before = (out / "eval.json").read_text()
    capsys.readouterr()
    assert main(["evaluate", "--weights", str(second), *WEIGHTS, "--suite", "knn", "--out", str(out), *FAST]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "never merged" in err and sha256(first)[:12] in err, err
    assert "evaluate into another folder" in err and f"delete {out / 'eval.json'}" in err
    assert (out / "eval.json").read_text() == before
    # the same weights on other preprocessing are another model too
    assert main(["evaluate", "--weights", str(first), *WEIGHTS, "--suite", "knn", "--out", str(out), "--mean", "0.4",
                 *FAST]) == 2  # fmt: skip
    assert "never merged" in capsys.readouterr().err
    assert main(["evaluate", "--weights", str(first), *WEIGHTS, "--suite", "knn", "--out", str(out), *FAST]) == 0
    assert set(json.loads((out / "eval.json").read_text())) == {"linear", "knn"}  # same model: merged


def test_a_changed_checkpoint_moves_the_earlier_results_out(tmp_path, capsys):
    run = pretrain(load_config(None, tiny_overrides(tmp_path / "run")))
    ckpt = run / "checkpoints" / "last.ckpt"
    evaluate_run(run, ["linear"], EvaluateSettings(device="cpu", max_train=200, report=False))
    old = recorded(run, "linear")
    assert old["sha256"] == sha256(ckpt) and old["preprocessing"]["dataset"] == "digits"

    state = torch.load(ckpt, map_location="cpu", weights_only=False)  # "trained on": other backbone weights
    key = next(k for k in state["state_dict"] if k.startswith("backbone.") and k.endswith("weight"))
    state["state_dict"][key] = state["state_dict"][key] + 0.01
    torch.save(state, ckpt)

    assert main(["evaluate", str(run), "--suite", "knn", *FAST]) == 0
    out = capsys.readouterr().out
    stored = json.loads((run / "eval.json").read_text())
    assert set(stored) == {"knn"} and stored["knn"]["protocol"]["checkpoint"]["sha256"] == sha256(ckpt)
    (aside,) = run.glob("eval-*.json")
    assert json.loads(aside.read_text())["linear"]["protocol"]["checkpoint"] == old
    assert "the checkpoint changed since linear were evaluated" in out and aside.name in out
    assert "re-run them with --suite linear" in out

    evaluate_run(
        run, ["linear"], EvaluateSettings(device="cpu", max_train=200, report=False)
    )  # the same checkpoint: merged
    assert set(json.loads((run / "eval.json").read_text())) == {"knn", "linear"}


def test_model_records_compare_by_content_hash_and_preprocessing():
    pre = {"dataset": "digits", "channels": 1, "image_size": 28, "num_classes": 10, "mean": [0.1], "std": [0.2]}
    current = {"path": "a/last.ckpt", "epoch": 1, "global_step": 4, "sha256": "ab" * 32, "preprocessing": pre}
    assert same_model({**current, "path": "moved/last.ckpt"}, current)  # a moved run is the same model
    assert not same_model({**current, "sha256": "cd" * 32}, current)
    assert not same_model({**current, "preprocessing": {**pre, "mean": [0.5]}}, current)
    assert not same_model({"path": "a/last.ckpt", "epoch": 1, "global_step": 4}, current)
    legacy = {"path": "a/last.ckpt", "epoch": 1, "global_step": 4}  # written before hashes: by its step
    assert legacy_same_run(legacy, current) and not legacy_same_run({**legacy, "global_step": 8}, current)
    assert not legacy_same_run(current, current)  # a hashed record is compared by its hash
