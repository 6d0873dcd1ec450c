"""A newcomer's folder: class sub-folders of gray, RGB and RGBA PNGs and gray/RGB JPEGs, with two corrupt files.

One policy for unreadable files in pretrain, evaluate and score (skip: one line with the count and a list file;
error: one error listing them all, before any work), each file checked once; ``data.channels`` converts every
image the way PIL's ``convert`` does, and the automatic choice looks at every image, not the first file's.
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import probcl.data.unreadable as unreadable_module
from probcl.data.decoding import CorruptImageError, check_image
from probcl.data.loaders import load_dataset
from probcl.data.unreadable import UnreadableFiles
from probcl.errors import DatasetError

SIZE = 16  # every file is 16 x 16: loading converts channels without resizing, so pixels compare exactly
KINDS = [("L", "png"), ("RGB", "png"), ("RGBA", "png"), ("L", "jpg"), ("RGB", "jpg")]


@dataclass
class MixedFolder:
    root: Path
    train: list[Path]  # readable training files
    test: list[Path]
    corrupt: list[Path]  # both in train/


def make_mixed_folder(root: Path, per_class: int = 14, test_per_class: int = 5) -> MixedFolder:
    """train/{a,b}/ and test/{a,b}/ with the five kinds in turn (the first file of each folder is gray, as the
    first file probcl's old rule looked at), plus a non-image and a PNG cut in half in train/."""
    rng = np.random.default_rng(0)
    files: dict[str, list[Path]] = {"train": [], "test": []}
    for split, count in (("train", per_class), ("test", test_per_class)):
        for cls in ("a", "b"):
            folder = root / split / cls
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                mode, ext = KINDS[i % len(KINDS)]
                bands = len(mode)
                pixels = rng.integers(0, 256, (SIZE, SIZE, bands), dtype=np.uint8)
                path = folder / f"{i:02d}-{mode}.{ext}"
                Image.fromarray(pixels[..., 0] if bands == 1 else pixels, mode).save(path)
                files[split].append(path)
    whole = files["train"][1].read_bytes()
    corrupt = [root / "train" / "a" / "99-not-an-image.png", root / "train" / "b" / "99-cut.png"]
    corrupt[0].write_bytes(b"this is not an image")
    corrupt[1].write_bytes(whole[: len(whole) // 2])
    return MixedFolder(root, files["train"], files["test"], corrupt)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> MixedFolder:
    return make_mixed_folder(tmp_path_factory.mktemp("mixed"))


def test_the_check_agrees_with_a_full_decode(folder):
    """The up-front check (header, and PNG checksums) rejects exactly the files that PIL cannot load in full."""
    for path in folder.train + folder.test + folder.corrupt:
        try:
            with Image.open(path) as img:
                img.load()
            loads = True
        except (OSError, SyntaxError):
            loads = False
        try:
            check_image(path)
            checks = True
        except CorruptImageError:
            checks = False
        assert checks == loads, path


@pytest.mark.parametrize("channels, mode", [(3, "RGB"), (1, "L")])
def test_given_channels_convert_every_image_as_pil_does(folder, channels, mode):
    data = load_dataset(f"folder:{folder.root}", "all", None, False, SIZE, channels, unreadable=UnreadableFiles())
    assert sorted(Path(p) for p in data.paths) == sorted(folder.train + folder.test)
    for i, path in enumerate(data.paths):
        expected = np.asarray(Image.open(path).convert(mode))
        expected = expected[None] if expected.ndim == 2 else expected.transpose(2, 0, 1)
        assert data[i][0].shape == (channels, SIZE, SIZE)
        assert torch.equal(data[i][0], torch.from_numpy(expected.copy())), path


def test_automatic_channels_look_at_every_image(folder, tmp_path):
    """Mixed folder: RGB, though its first file is gray; an all-gray folder: gray."""
    assert Image.open(sorted(folder.train)[0]).mode == "L"
    mixed = load_dataset(f"folder:{folder.root}", "train", image_size=SIZE, unreadable=UnreadableFiles())
    colour = sum(Image.open(p).mode != "L" for p in folder.train + folder.test)
    assert mixed.channels == 3 and mixed.channels_note.startswith(f"auto: {colour} of the folder's 38 images")
    gray = make_mixed_folder(tmp_path / "gray", per_class=1, test_per_class=1)  # KINDS[0] only: gray PNGs
    for path in gray.corrupt:
        path.unlink()
    assert load_dataset(f"folder:{gray.root}", "all", image_size=SIZE).channels == 1


def test_skip_leaves_the_corrupt_files_out_and_checks_each_file_once(folder, monkeypatch):
    checked: list[str] = []

    def counting(path):
        checked.append(str(path))
        return check_image(path)

    monkeypatch.setattr(unreadable_module, "check_image", counting)
    files = UnreadableFiles("skip")
    train = load_dataset(f"folder:{folder.root}", "train", image_size=SIZE, unreadable=files)
    test = load_dataset(f"folder:{folder.root}", "test", image_size=SIZE, channels=3, unreadable=files)
    assert sorted(map(Path, train.paths)) == sorted(folder.train) and len(test) == len(folder.test)
    assert sorted(checked) == sorted(str(p) for p in folder.train + folder.test + folder.corrupt)
    assert sorted(files.found) == sorted(str(p) for p in folder.corrupt)


def test_error_lists_every_unreadable_file_in_one_line(folder):
    with pytest.raises(DatasetError) as caught:
        load_dataset(f"folder:{folder.root}", "test", image_size=SIZE, unreadable=UnreadableFiles("error"))
    message = str(caught.value)  # the test split is clean: the whole folder is checked at once
    assert "\n" not in message and message.startswith("2 of the 40 image files")
    assert all(str(p) in message for p in folder.corrupt) and "--data.on_unreadable=skip" in message


def _one_line_about_unreadable(err: str) -> str:
    lines = [line for line in err.splitlines() if "unreadable" in line]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture(scope="module")
def trained(folder, tmp_path_factory):
    """pretrain (2 tiny epochs) on the folder with the default policy (skip); its stdout and stderr."""
    from probcl.cli import main

    run = tmp_path_factory.mktemp("runs") / "run"
    argv = ["pretrain", "--run-dir", str(run), "--dataset", f"folder:{folder.root}", "--data.image_size", str(SIZE)]
    argv += ["--epochs", "2", "--batch-size", "8", "--model.width", "4", "--train.progress_bar", "false"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    captured = {"out": out.getvalue(), "err": err.getvalue()}
    assert code == 0, captured["err"]
    return run, captured


def test_pretrain_skips_with_one_line_and_a_list_file(folder, trained):
    run, captured = trained
    line = _one_line_about_unreadable(captured["err"])
    assert re.search(rf"skipped 2 unreadable image files .*listed in {re.escape(str(run / 'unreadable.txt'))}", line)
    listed = [row.split("\t")[0] for row in (run / "unreadable.txt").read_text().splitlines()]
    assert sorted(listed) == sorted(str(p) for p in folder.corrupt)
    info = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["hyper_parameters"]["data_info"]
    assert info["channels"] == 3  # the folder holds colour images; its first file is gray


def test_pretrain_with_error_lists_both_files_before_training(folder, tmp_path, capsys):
    from probcl.cli import main

    run = tmp_path / "run"
    code = main(
        ["pretrain", "--run-dir", str(run), "--dataset", f"folder:{folder.root}", "--data.image_size", str(SIZE)]
        + ["--epochs", "1", "--batch-size", "8", "--model.width", "4", "--data.on_unreadable", "error"]
    )
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert all(str(p) in err for p in folder.corrupt) and not (run / "checkpoints").exists()


def test_score_and_evaluate_follow_the_same_policy(folder, trained, tmp_path, capsys):
    from probcl.cli import main

    run, _ = trained
    out = tmp_path / "scores.csv"
    assert main(["score", str(run), "--dataset", f"folder:{folder.root}", "--out", str(out)]) == 0
    line = _one_line_about_unreadable(capsys.readouterr().err)
    assert (
        f"skipped 2 unreadable image files (--on-unreadable=skip), listed in {tmp_path / 'scores.unreadable.txt'}"
        in line
    )
    listed = [row.split("\t")[0] for row in (tmp_path / "scores.unreadable.txt").read_text().splitlines()]
    assert sorted(listed) == sorted(str(p) for p in folder.corrupt)
    assert len(out.read_text().splitlines()) == 1 + len(folder.train) + len(folder.test)  # header + readable
    for argv in (["score", str(run), "--dataset", f"folder:{folder.root}"], ["evaluate", str(run), "--suite", "knn"]):
        assert main([*argv, "--on-unreadable", "error"]) == 1
        err = capsys.readouterr().err
        assert "2 of the 40 image files" in err and all(str(p) in err for p in folder.corrupt)
        assert "--on-unreadable=skip" in err


def test_pretrain_start_up_summary_matches_a_hand_count(folder, trained):
    """28 readable training images (2 classes x 14), batch 8: 28 // 8 = 3 full batches per epoch, 6 steps in 2
    epochs, as the trained checkpoint's own step count confirms; too few steps: one warning line."""
    run, captured = trained
    out = captured["out"]
    assert len(folder.train) == 28
    assert "  images     28 (2 classes)\n" in out
    assert re.search(
        r"  channels   3 \(auto: 22 of the folder's 38 images are colour", out
    )  # 8 + 8 train, 3 + 3 test: RGB/RGBA PNG, RGB JPEG
    assert "  size       16 x 16 px\n" in out and "  batch      8\n" in out
    assert "  steps      3 per epoch x 2 epochs = 6 optimiser steps\n" in out
    from probcl.runtime.precision import resolve_precision

    default = resolve_precision("auto", "cpu").precision  # the default: bf16-mixed where the CPU has native bf16
    assert f"  precision  {default}\n" in out and "  device     cpu\n" in out
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 6
    warnings = [line for line in captured["err"].splitlines() if "warning: this run takes only" in line]
    assert len(warnings) == 1 and "6 optimiser steps (3 per epoch x 2 epochs; 28 images, batch 8)" in warnings[0]
    assert "raise train.epochs to 17" in warnings[0]  # ceil(50 / 3)
