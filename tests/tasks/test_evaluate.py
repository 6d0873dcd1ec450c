"""`evaluate` takes one settings object (EvaluateSettings), checked by from_dict before any work."""

from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np
import pytest

import probcl
from probcl.config import from_dict
from probcl.errors import ConfigError, ProbclError
from probcl.tasks.evaluate import EvaluateSettings


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"batch_size": 0}, r"^batch_size must be >= 1, got 0$"),
        ({"max_train": 0}, r"^max_train must be >= 1, got 0$"),
        ({"seed": -1}, r"^seed must be in \[0, 4294967295\], got -1$"),
        ({"num_workers": -1}, r"^num_workers must be >= 0, got -1$"),
        ({"feature_layer": "logits"}, r"^feature_layer must be one of backbone, projection, pixels; got 'logits'$"),
        ({"batchsize": 8}, r"^unknown config key\(s\) batchsize; valid keys: device, batch_size, feature_layer"),
    ],
)
def test_python_evaluate_checks_its_settings_before_looking_at_the_run(tmp_path, settings, message):
    with pytest.raises(ConfigError, match=message):
        probcl.evaluate(tmp_path / "no-such-run", **settings)


def test_the_settings_reach_the_model_context(tmp_path):
    settings = from_dict(EvaluateSettings, {"device": "cpu", "batch_size": 7, "max_train": 30, "seed": 3})
    ctx = settings.context(tmp_path)
    assert (ctx.run_dir, ctx.device, ctx.batch_size, ctx.max_train, ctx.seed) == (tmp_path, "cpu", 7, 30, 3)
    assert (ctx.feature_layer, ctx.num_workers, ctx.data_root) == ("backbone", 0, None)
    # every field of the context's that EvaluateSettings also has is passed on, none forgotten
    shared = {f.name for f in dataclasses.fields(EvaluateSettings)} & {f.name for f in dataclasses.fields(ctx)}
    assert all(getattr(ctx, name) == getattr(settings, name) for name in shared)


@pytest.fixture
def tiny_run(tiny_config):
    from probcl.tasks.pretrain import pretrain

    return pretrain(tiny_config(**{"train.limit_train_batches": 1, "train.monitor_every_n_epochs": 0}))


def test_python_evaluate_takes_a_suite_string_and_writes_nothing_to_stdout(tiny_run, capsys, monkeypatch):
    monkeypatch.delenv("PROBCL_NO_PROGRESS", raising=False)
    capsys.readouterr()
    for stream in (sys.stdout, sys.stderr):  # as in a terminal or notebook, where progress bars are drawn
        monkeypatch.setattr(stream, "isatty", lambda: True)
    one = probcl.evaluate(tiny_run, suites="knn", device="cpu", max_train=200, report=False, figures=False)
    two = probcl.evaluate(tiny_run, suites="knn,linear", device="cpu", max_train=200, report=False, figures=False)
    assert list(one) == ["knn"] and list(two) == ["knn", "linear"]
    assert capsys.readouterr().out == ""  # a library call leaves the caller's stdout alone


def test_dir_and_help_list_the_lazy_functions():
    import pydoc

    assert {"load", "evaluate"} <= set(dir(probcl))
    text = pydoc.render_doc(probcl, renderer=pydoc.plaintext)
    assert "load(" in text and "evaluate(" in text


def test_embedding_a_folder_names_the_current_flag(tiny_run, tmp_path):
    (tmp_path / "odd").mkdir()
    model = probcl.load(tiny_run, device="cpu")
    with pytest.raises(ProbclError, match=r"--dataset folder:") as error:
        model.embed(tmp_path / "odd")
    assert "--data " not in str(error.value)


def test_fewshot_asks_for_more_max_train_only_when_it_capped_the_images(tiny_run):
    fewshot = {"fewshot": {"fractions": [0.001]}}  # 0.1 % of at most 1437 labels: too few for 10 classes
    common = {"device": "cpu", "report": False, "figures": False, "options": fewshot}
    with pytest.raises(ConfigError, match="raise fewshot.fractions or add labelled images$") as every_image:
        probcl.evaluate(tiny_run, suites="fewshot", **common)
    assert "--max-train" not in str(every_image.value)
    with pytest.raises(ConfigError, match="raise --max-train or fewshot.fractions$"):
        probcl.evaluate(tiny_run, suites="fewshot", max_train=300, **common)


def test_a_run_on_unlabelled_images_is_measured_on_labelled_ones_with_the_transfer_suite(tmp_path, capsys):
    """docs/how-to/own-images.md ("Unlabeled data"): the way it gives works, and the refused spelling names it."""
    from PIL import Image

    from probcl.cli import main
    from probcl.config import load_config
    from probcl.tasks.pretrain import pretrain
    from tests.conftest import tiny_overrides

    rng = np.random.default_rng(0)
    flat, labelled = tmp_path / "flat", tmp_path / "labelled"
    flat.mkdir()
    for i in range(64):
        Image.fromarray(rng.integers(0, 256, (20, 20), dtype=np.uint8)).save(flat / f"{i}.png")
    for name, level in (("dark", 40), ("light", 215)):  # two classes a probe separates by brightness alone
        (labelled / name).mkdir(parents=True)
        for i in range(30):
            pixels = np.clip(level + rng.normal(0, 10, (20, 20)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(labelled / name / f"{i}.png")
    run = pretrain(load_config(None, tiny_overrides(tmp_path / "run", **{"data.dataset": f"folder:{flat}"})))
    spec = f"folder:{labelled}"
    assert main(["evaluate", str(run), "--dataset", spec]) == 2
    assert f"--suite transfer --option transfer.datasets={spec}" in capsys.readouterr().err
    assert main(["evaluate", str(run), "--suite", "transfer", "--option", f"transfer.datasets={spec}"]) == 0
    result = json.loads((run / "eval.json").read_text())["transfer"]
    assert result[spec]["top1"] > 80  # two brightness classes: a working probe on the frozen features


def test_a_checkpoint_file_is_evaluated_into_its_run(tiny_run):
    """`probcl evaluate RUN/checkpoints/last.ckpt` merges into RUN/eval.json (it once tried to write into the file)."""
    from probcl.core.layout import RunPaths

    checkpoint = RunPaths(tiny_run).last
    result = probcl.evaluate(checkpoint, suites="knn", device="cpu", max_train=200, report=False, figures=False)
    written = json.loads((tiny_run / "eval.json").read_text())
    assert written["knn"]["top1"] == result["knn"]["top1"]
    assert written["knn"]["protocol"]["checkpoint"]["path"] == str(checkpoint)


def test_foreign_weights_take_only_positive_sizes_and_a_file_not_a_folder(tmp_path, capsys):
    """--image-size/--channels 0 had been replaced by the default silently, a negative size failed in a resize
    traceback; a folder given as --weights was said not to exist."""
    from probcl.cli import main
    from probcl.models.encoder import load_encoder

    for flag in ("--image-size", "--channels"):
        for value in ("0", "-5"):
            with pytest.raises(SystemExit) as stop:
                main(["evaluate", "--weights", str(tmp_path / "w.safetensors"), flag, value])
            assert stop.value.code == 2 and "must be at least 1" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="is a folder; name the weights file in it"):
        load_encoder(tmp_path, "digits")
    (tmp_path / "w.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError, match="image_size must be at least 1, got 0"):
        load_encoder(tmp_path / "w.safetensors", "digits", image_size=0)
