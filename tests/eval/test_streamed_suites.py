"""Every suite runs on a run trained on a streamed folder (issue #29, findings 3 and 7): the perturbing suites get
its test split decoded into memory (said in a note), ``--suite all`` runs what can run and lists what it skipped
at the end, and the ``ood`` suite prints a per-set summary while eval.json keeps every number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import tiny_overrides
from PIL import Image

import probcl
from probcl.cli import main
from probcl.config import load_config
from probcl.data.loaders import load_dataset
from probcl.data.specs import HOLDOUT_FRACTION
from probcl.eval import inputs
from probcl.eval.ood import ood_summary
from probcl.tasks.pretrain import pretrain
from tests.data.test_streamed_folder import one_torch_thread  # noqa: F401 - fixture

CLASSES, PER_CLASS = 3, 40
FAST = ["--device", "cpu", "--no-report", "--max-train", "100"]
CHEAP = {  # the smallest settings of each perturbing suite
    "ood.datasets": "inverted",
    "ood.knn_k": "10",
    "ood.mc_passes": "2",
    "corruptions.corruptions": "brightness",
    "adversarial.eps": "4",
    "adversarial.pgd_steps": "1",
    "lipschitz.max_images": "8",
}
OPTIONS = [arg for key, value in CHEAP.items() for arg in ("--option", f"{key}={value}")]
TEST_IMAGES = round(HOLDOUT_FRACTION * CLASSES * PER_CLASS)  # folders without a test split hold out 20 %


@pytest.fixture(scope="module")
def folder_run(tmp_path_factory) -> Path:
    """SimCLR (4 steps) on a streamed folder (the default for folder:PATH): 3 class sub-folders of 40 digits each."""
    root = tmp_path_factory.mktemp("streamed")
    digits = load_dataset("digits", "train")
    labels, kept = digits.labels(), {c: 0 for c in range(CLASSES)}
    for i in range(len(digits)):
        label = int(labels[i])
        if label in kept and kept[label] < PER_CLASS:
            kept[label] += 1
            path = root / "images" / f"class-{label}" / f"{i:04d}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(digits.images[i, 0].numpy()).save(path)
    overrides = tiny_overrides(root / "run", **{"data.dataset": f"folder:{root / 'images'}"})
    return pretrain(load_config(None, overrides))


def test_suite_all_runs_every_suite_on_a_streamed_folder_run(folder_run, capsys, one_torch_thread):  # noqa: F811
    assert main(["evaluate", str(folder_run), "--suite", "all", *OPTIONS, *FAST]) == 0
    out = capsys.readouterr().out
    stored = json.loads((folder_run / "eval.json").read_text())
    assert {"ood", "corruptions", "adversarial", "lipschitz", "fewshot", "linear", "knn"} <= set(stored)
    assert stored["corruptions"]["protocol"]["images"] == TEST_IMAGES
    ood = stored["ood"]["protocol"]  # the ood suite calibrates on one half of the ID test images, scores the other
    assert ood["id_images"] + ood["calibration_images"] == TEST_IMAGES
    for suite in ("ood", "corruptions", "adversarial", "lipschitz"):
        assert f"note: {suite}: the " in out and "decoded into memory" in out
    # skipped suites are listed together, after the table and the notes, each with its reason
    tail = out[out.index("results merged into") :]
    # heldout (study v3's tuning protocol) needs training images the run did not pretrain on: here there are none
    assert "skipped 2 suite(s) that cannot run here:\n  heldout: " in tail and "0 of them not pretrained on" in tail
    assert "\n  transfer: no default transfer target" in tail
    assert tail.index("note: ") < tail.index("skipped 2 suite(s)")
    assert "transfer" not in stored
    # fewshot: 1 % of 96 labels is 3 images (< 2 per class): left out with a note, 10 % measured
    assert set(stored["fewshot"]) == {"10%", "protocol"} and "fewshot: 1% of the labels left out" in out
    # ood: three console rows per set; eval.json keeps every score's four metrics
    ood_rows = [line for line in out.splitlines() if line.startswith("│ ood ")]
    assert len(ood_rows) == 3 and "inverted: best single (" in out
    scores = stored["ood"]["sets"]["inverted"]
    assert len(scores) > 3 and all(set(m) == {"auroc", "aupr_in", "aupr_out", "fpr95"} for m in scores.values())


def test_a_test_split_too_large_for_memory_names_the_subset_that_fits(folder_run, monkeypatch, capsys):
    size = probcl.load(folder_run, device="cpu").data_info.image_size  # the model's input: gray, size x size
    monkeypatch.setattr(inputs, "IN_MEMORY_BYTES", 10 * size * size + 5)  # room for 10 decoded test images
    argv = ["evaluate", str(folder_run), "--suite", "corruptions", "--option", "corruptions.corruptions=brightness"]
    assert main([*argv, *FAST]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "suite corruptions perturbs the test images in memory" in err, err
    assert err.endswith("pass --option corruptions.max_images=10 (a seeded subset that fits)")


def test_ood_summary_is_the_combined_and_the_best_single_score_per_set():
    def metrics(auroc: float) -> dict:
        return {"auroc": auroc, "aupr_in": 0.5, "aupr_out": 0.5, "fpr95": 1 - auroc}

    result = {
        "sets": {
            "digits": {"msp": metrics(0.7), "knn10": metrics(0.9), "energy": metrics(0.8), "combined": metrics(0.85)},
            "inverted": {"msp": metrics(0.99), "mahalanobis": metrics(0.6), "combined": metrics(0.97)},
        }
    }
    assert ood_summary(result) == {
        "digits: combined auroc": 0.85,
        "digits: combined fpr95": pytest.approx(0.15),
        "digits: best single (knn10) auroc": 0.9,
        "inverted: combined auroc": 0.97,
        "inverted: combined fpr95": pytest.approx(0.03),
        "inverted: best single (msp) auroc": 0.99,
    }
