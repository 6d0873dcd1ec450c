"""Config validation and the CLI's promised errors: one clear line, non-zero exit, nothing written."""

import pytest

from probcl.cli import main
from probcl.config import ConfigError, load_config


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"method_args.temperature": -0.1}, "temperature must be > 0"),
        ({"train.batch_size": 1}, "batch_size must be >= 2"),
        ({"optim.lr": 0}, "optim.lr must be > 0"),
        ({"optim.name": "rmsprop"}, "one of sgd, adam, adamw, lars"),
        ({"train.epochs": "many"}, "must be an integer"),
        ({"augment.crop_scale": [0.9, 0.2]}, "crop_scale"),
        ({"model.depth": 3}, "unknown config key.*model.depth.*valid keys"),
    ],
)
def test_invalid_values_are_rejected(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        cfg = load_config(None, {"run_dir": str(tmp_path / "r"), **overrides})
        from probcl.config import from_dict
        from probcl.methods import METHODS

        from_dict(METHODS.get(cfg.method).Params, cfg.method_args, "method_args")


def run_cli(args, capsys):
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_unknown_method_and_dataset_list_valid_choices(tmp_path, capsys):
    code, _, err = run_cli(["pretrain", "--method", "simclrr", "--run-dir", str(tmp_path / "a")], capsys)
    assert code == 2 and "unknown method 'simclrr'" in err and "simclr" in err
    code, _, err = run_cli(["pretrain", "--dataset", "fmnist", "--run-dir", str(tmp_path / "b")], capsys)
    assert code == 2 and "unknown dataset 'fmnist'" in err and "fashion-mnist" in err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_negative_temperature_from_cli(tmp_path, capsys):
    code, _, err = run_cli(
        [
            "pretrain",
            "--config",
            "fashion-mnist/simclr",
            "--method_args.temperature",
            "-1",
            "--run-dir",
            str(tmp_path / "t"),
        ],
        capsys,
    )
    assert code == 2 and "temperature" in err and not (tmp_path / "t").exists()


def test_missing_paths_give_one_line_errors(tmp_path, capsys):
    code, _, err = run_cli(["pretrain", "--config", str(tmp_path / "nope.yaml")], capsys)
    assert code == 2 and "not found" in err
    code, _, err = run_cli(["evaluate", str(tmp_path / "no-run")], capsys)
    assert code == 1 and "does not exist" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(
        ["pretrain", "--dataset", f"folder:{tmp_path / 'none'}", "--run-dir", str(tmp_path / "f")], capsys
    )
    assert code == 1 and "does not exist" in err


def test_batch_larger_than_dataset(tmp_path, capsys):
    code, _, err = run_cli(
        ["pretrain", "--dataset", "digits", "--batch-size", "5000", "--run-dir", str(tmp_path / "r")], capsys
    )
    assert code == 2 and "batch_size=5000" in err and not (tmp_path / "r").exists()


def test_list_shows_every_group(capsys):
    code, out, _ = run_cli(["list"], capsys)
    assert code == 0
    for expected in (
        "methods:",
        "  simclr",
        "datasets:",
        "  fashion-mnist",
        "  folder:PATH[:stream=false]",
        "evaluation suites:",
        "  linear",
        "  knn",
        "presets:",
    ):
        assert expected in out.splitlines()
    assert any(line.startswith("  fashion-mnist/simclr ") for line in out.splitlines())  # name, then its line


def test_cli_pretrain_evaluate_export_round_trip(tmp_path, capsys):
    run = tmp_path / "run"
    args = [
        "pretrain",
        "--dataset",
        "digits",
        "--run-dir",
        str(run),
        "--epochs",
        "1",
        "--batch-size",
        "32",
        "--model.width",
        "4",
        "--model.proj_hidden",
        "16",
        "--train.limit_train_batches",
        "2",
        "--train.progress_bar",
        "false",
        "--train.monitor_train_samples",
        "200",
    ]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    code, out, err = run_cli(["evaluate", str(run), "--suite", "knn,linear"], capsys)
    assert code == 0, err
    import json

    results = json.loads((run / "eval.json").read_text())
    assert set(results) == {"knn", "linear"} and results["knn"]["protocol"]["weighted"].startswith("k=200")
    code, out, err = run_cli(["evaluate", str(run), "--suite", "linear", "--features", "pixels"], capsys)
    separate = json.loads((run / "eval.json").read_text())
    assert code == 0 and "linear@pixels" in separate
    # several layers in one call: the same results as one call per layer, under the same keys
    (run / "eval.json").unlink()
    code, out, err = run_cli(["evaluate", str(run), "--suite", "linear", "--features", "backbone,pixels"], capsys)
    together = json.loads((run / "eval.json").read_text())
    assert code == 0 and set(together) == {"linear", "linear@pixels"}
    for key in together:
        assert together[key]["top1"] == separate[key]["top1"]
    assert out.count("│ linear@pixels") >= 1 and out.count("report in") == 1
    code, out, err = run_cli(["evaluate", str(run), "--suite", "nope"], capsys)
    assert code == 2 and "unknown evaluation suite" in err


def test_recipe_leaves_out_locations_and_runtime_settings():
    """What a resume (or a benchmark cell) is checked against: not where the run lives or how fast it runs."""
    import copy

    from probcl.config import Config, recipe, recipe_changes

    saved = Config().to_dict()
    moved = copy.deepcopy(saved)
    moved["run_dir"], moved["init"] = "elsewhere", "some/run"
    moved["train"]["precision"], moved["train"]["loggers"] = "bf16-mixed", ["wandb"]
    moved["data"]["root"] = "/mnt/data"
    moved["augment"]["backend"] = "device"  # whose code draws the views: the same distributions
    assert recipe(moved) == recipe(saved) and recipe_changes(saved, moved) == []
    assert "run_dir" not in recipe(saved) and "precision" not in recipe(saved)["train"]
    assert recipe(saved)["train"]["batch_size"] == saved["train"]["batch_size"]
    moved["optim"]["lr"] = 0.5
    assert recipe_changes(saved, moved) == [f"optim.lr (saved {saved['optim']['lr']!r}, now 0.5)"]
