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
    assert {k: v for k, v in printed.items() if k != "method_args"} == {
        k: v for k, v in expected.items() if k != "method_args"
    }
    # the method's own keys: the preset's values, and every other EBCLR key at its Params default
    assert contains(printed["method_args"], expected["method_args"])
    assert {"lam", "temperature", "others", "sgld", "proj_norm_weight"} <= set(printed["method_args"])
    assert load_config(None, printed).to_dict()["train"] == expected["train"]  # it loads back as a config
