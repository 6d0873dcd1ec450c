"""A researcher's first hour with their own images (issue #29), end to end through the CLI: a folder with class
sub-folders of gray/RGB/RGBA PNGs and JPEGs and two corrupt files -> pretrain -> ``evaluate --suite all`` ->
``score --html`` -> ``export --format onnx`` -> onnxruntime, compared with ``probcl.load(...).embed`` of a NumPy
array. Each step must succeed in one go (no re-run per bad file, no suite failing the others)."""

from __future__ import annotations

import contextlib
import csv
import io
import json

import numpy as np
import pytest
from PIL import Image

from probcl.cli import main
from tests.data.test_unreadable_files import SIZE, make_mixed_folder


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.slow
def test_a_newcomers_folder_goes_from_pretraining_to_onnx(tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    folder = make_mixed_folder(tmp_path / "images")
    run = tmp_path / "run"
    code, out, err = run_cli(
        "pretrain",
        "--config",
        "fashion-mnist/simclr",
        "--data.dataset",
        f"folder:{folder.root}",
        "--data.image_size",
        SIZE,
        "--model.width",
        4,
        "--train.epochs",
        2,
        "--train.batch_size",
        8,
        "--train.progress_bar",
        "false",
        "--run_dir",
        run,
    )
    assert code == 0, err
    # the start-up summary, and ONE line for both unreadable files (not a stop at the first)
    assert "images" in out and "steps" in out
    # the preset's gray recipe on colour images is said, not kept silently (issue 43 item 8)
    assert "augment    small: " in out and "no colour distortion on colour images" in out
    assert err.count("skipped 2 unreadable image files") == 1

    code, out, err = run_cli("evaluate", run, "--suite", "all", "--max-train", 20)
    assert code == 0, err
    results = json.loads((run / "eval.json").read_text())
    assert {"linear", "knn", "ood", "corruptions", "adversarial"} <= set(results)  # perturbing suites on a stream
    # every result says which checkpoint produced it: one model per eval.json
    checkpoints = {json.dumps(r["protocol"]["checkpoint"], sort_keys=True) for r in results.values()}
    assert len(checkpoints) == 1
    # the folder's class names label the results (issue 43 item 9): eval.json, and the t-SNE map's legend
    assert results["linear"]["protocol"]["class_names"] == ["a", "b"]
    assert json.loads((run / "plots" / "embedding-map.json").read_text())["protocol"]["class_names"] == ["a", "b"]

    sheet = tmp_path / "sheet.html"
    code, out, err = run_cli(
        "score", run, "--dataset", f"folder:{folder.root}", "--out", tmp_path / "scores.csv", "--html", sheet
    )
    assert code == 0, err
    html = sheet.read_text()
    assert all(path.name in html for path in folder.corrupt)  # the skipped files are listed on the sheet
    rows = (tmp_path / "scores.csv").read_text().splitlines()
    assert len(rows) - 1 == len(folder.train) + len(folder.test)  # every readable image, no corrupt one
    predicted = {row["predicted_class"] for row in csv.DictReader(io.StringIO("\n".join(rows)))}
    assert predicted <= {"a", "b"} and predicted
    assert json.loads((tmp_path / "scores.json").read_text())["protocol"]["class_names"] == ["a", "b"]

    code, out, err = run_cli("export", run, "--format", "onnx")
    assert code == 0, err
    export = run / "export"
    config = json.loads((export / "config.json").read_text())
    assert config["class_names"] == ["a", "b"]
    assert set(config["files"]) == {"weights", "onnx"} and all((export / f).is_file() for f in config["files"].values())

    images = np.stack([np.asarray(Image.open(p).convert("RGB").resize((SIZE, SIZE))) for p in folder.test[:6]])
    import probcl

    model = probcl.load(export)
    expected = model.embed(images).numpy()  # NumPy, channels last, as PIL holds images
    session = onnxruntime.InferenceSession(str(export / config["files"]["onnx"]))
    batch = images.transpose(0, 3, 1, 2).astype(np.float32) / 255.0
    (got,) = session.run(None, {session.get_inputs()[0].name: batch})
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)
