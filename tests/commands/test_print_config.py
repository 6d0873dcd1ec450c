"""`probcl pretrain --print-config`: every key with the value the run would use, and no run written."""

from __future__ import annotations

import yaml

from probcl.cli import main
from probcl.config import load_config
from probcl.core.presets import resolve_config_path


def contains(full: dict, part: dict) -> bool:
    """Every key of ``part`` is in ``full`` with the same value (nested mappings compared the same way)."""
    return all(
        contains(full[k], v) if isinstance(v, dict) else full.get(k, object()) == v for k, v in part.items()
    ) and all(k in full for k in part)


def test_print_config_shows_every_key_with_defaults_and_writes_nothing(tmp_path, capsys):
    run = tmp_path / "never"
    argv = ["pretrain", "--config", "fashion-mnist/ebclr", "--run-dir", str(run), "--train.epochs", "3"]
    assert main([*argv, "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert not run.exists()
    cfg = load_config(resolve_config_path("fashion-mnist/ebclr"), {"run_dir": str(run), "train": {"epochs": 3}})
    expected = cfg.to_dict()
    # what the data decides is printed as resolved from the training images: Fashion-MNIST is 28 x 28 gray
    assert (printed["data"]["image_size"], printed["data"]["channels"]) == (28, 1)
    expected["data"].update(image_size=28, channels=1)
    assert {k: v for k, v in printed.items() if k != "method_args"} == {
        k: v for k, v in expected.items() if k != "method_args"
    }
    # the method's own keys: the preset's values, and every other EBCLR key at its Params default
    assert contains(printed["method_args"], expected["method_args"])
    assert {"lam", "temperature", "others", "sgld", "proj_norm_weight"} <= set(printed["method_args"])
    assert load_config(None, printed).to_dict()["train"] == expected["train"]  # it loads back as a config


def test_print_config_resolves_a_folders_size_and_channels(tmp_path, capsys):
    """A folder of 32 px colour images trains at 64 x 64 RGB unless data.image_size says otherwise: printed so."""
    from PIL import Image

    for i in range(5):
        Image.new("RGB", (32, 32), (40 * i, 0, 200)).save(tmp_path / f"{i}.png")
    assert main(["pretrain", "--dataset", f"folder:{tmp_path}", "--print-config"]) == 0
    data = yaml.safe_load(capsys.readouterr().out)["data"]
    assert (data["image_size"], data["channels"]) == (64, 3)
    assert main(["pretrain", "--dataset", f"folder:{tmp_path}", "--data.image_size", "32", "--print-config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["data"]["image_size"] == 32


def test_print_config_of_data_it_cannot_read_says_why(tmp_path, capsys):
    assert main(["pretrain", "--dataset", f"folder:{tmp_path / 'missing'}", "--print-config"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# data.image_size and data.channels are resolved from the training images, unreadable")
    assert yaml.safe_load(out)["data"]["image_size"] is None
