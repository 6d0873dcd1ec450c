"""Bad input to every sub-command: a non-zero exit, one line naming the problem, no traceback,
and nothing created or changed outside the run directory the command was pointed at.

Each case is ``(argv, expected message regex)``; ``{run}`` is a small trained SimCLR run,
``{tmp}`` the case's own folder, ``{data}`` a folder of prepared bad data files.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from probcl.cli import main


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    from probcl.config import load_config
    from probcl.tasks.pretrain import pretrain
    from tests.conftest import tiny_overrides

    return pretrain(load_config(None, tiny_overrides(tmp_path_factory.mktemp("trained") / "run")))


def _png(path: Path, array: np.ndarray, mode: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array, mode=mode).save(path)


@pytest.fixture(scope="module")
def data(tmp_path_factory, trained_run) -> Path:
    """Bad data specs, checkpoints and configs, made once."""
    root = tmp_path_factory.mktemp("bad-data")
    rng = np.random.default_rng(0)
    (root / "only-text").mkdir()
    (root / "only-text" / "readme.txt").write_text("not an image")
    (root / "empty").mkdir()
    (root / "single").mkdir()
    _png(root / "single" / "a.png", rng.integers(0, 255, (8, 8), dtype=np.uint8))
    for i in range(12):  # enough files for a train split of one batch; every one unreadable
        (root / "corrupt").mkdir(exist_ok=True)
        (root / "corrupt" / f"{i}.png").write_bytes(b"\x89PNG\r\n\x1a\n this is not a png")
        _png(root / "huge" / f"{i}.png", rng.integers(0, 255, (64, 64), dtype=np.uint8))
    npz = root / "npz"
    npz.mkdir()
    x = rng.integers(0, 255, (40, 8, 8), dtype=np.uint8)
    np.savez(npz / "float.npz", x=x.astype(np.float32) / 255)
    nan = x.astype(np.float32)
    nan[0, 0, 0] = np.nan
    np.savez(npz / "nan.npz", x=nan)
    np.savez(npz / "labels-out-of-range.npz", x=x, y=np.full(40, -7))
    np.savez(npz / "float-labels.npz", x=x, y=np.linspace(0, 3, 40))
    np.savez(npz / "no-x.npz", images=x)
    np.savez(npz / "five-channels.npz", x=rng.integers(0, 255, (40, 8, 8, 5), dtype=np.uint8))
    np.savez(npz / "not-square.npz", x=rng.integers(0, 255, (40, 8, 6), dtype=np.uint8))
    np.savez(npz / "label-count.npz", x=x, y=np.zeros(39, dtype=np.int64))
    (npz / "garbage.npz").write_bytes(b"PK not really a zip")
    (npz / "text.npz").write_text("x = 1, 2, 3\n")
    np.savez(npz / "objects.npz", x=np.array([x[0], "label"], dtype=object))
    np.savez(npz / "no-images.npz", x=np.zeros((0, 8, 8), dtype=np.uint8))
    (root / "corrupt.ckpt").write_bytes(b"not a checkpoint")
    meta = torch.load(trained_run / "checkpoints" / "last.ckpt", weights_only=False)
    other = {
        **meta,
        "hyper_parameters": {
            **meta["hyper_parameters"],
            "config": {**meta["hyper_parameters"]["config"], "method": "nope"},
        },
    }
    torch.save(other, root / "unknown-method.ckpt")
    future = {
        **meta,
        "hyper_parameters": {
            **meta["hyper_parameters"],
            "config": {**meta["hyper_parameters"]["config"], "future_key": 1},
        },
    }
    torch.save(future, root / "future-version.ckpt")
    moco = {
        **meta,
        "hyper_parameters": {
            **meta["hyper_parameters"],
            "config": {**meta["hyper_parameters"]["config"], "method": "moco"},
        },
    }
    torch.save(moco, root / "other-method-weights.ckpt")
    torch.save({"epoch": 1}, root / "not-probcl.ckpt")
    (root / "a-file").write_text("I am a file")
    (root / "weights.txt").write_text("weights?")
    (root / "bad.yaml").write_text("train: [unclosed\n")
    (root / "list.yaml").write_text("- a\n- b\n")
    (root / "twice.yaml").write_text("optim:\n  lr: 0.1\n  weight_decay: 0\n  lr: 0.2\n")
    (root / "latin1.yaml").write_bytes("# caf\xe9\ntrain: {}\n".encode("latin-1"))
    (root / "bench.yaml").write_text("nonsense_key: 1\n")
    return root


def _snapshot(*folders: Path) -> dict[str, tuple[int, int]]:
    files = {}
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file():
                stat = path.stat()
                files[str(path)] = (stat.st_mtime_ns, stat.st_size)
    return files


# (argv, message regex). Pretrain cases write only under {tmp}/run (their --run-dir).
PRETRAIN = [
    "pretrain",
    "--run-dir",
    "{tmp}/run",
    "--dataset",
    "digits",
    "--epochs",
    "1",
    "--batch-size",
    "8",
    "--train.limit_train_batches",
    "1",
    "--train.monitor_every_n_epochs",
    "0",
]
CASES = {
    # --- pretrain: config keys, types, ranges
    "unknown key": (PRETRAIN + ["--train.nope", "1"], r"unknown config key\(s\) train\.nope"),
    "unknown section": (PRETRAIN + ["--nope.x", "1"], r"unknown config key\(s\) nope"),
    "section given a value": (PRETRAIN + ["--data", "imgs"], r"data must be a mapping, got 'imgs': it is a section"),
    "bad int": (PRETRAIN + ["--epochs", "many"], r"train\.epochs must be an integer"),
    "fractional int": (PRETRAIN + ["--epochs", "1.5"], r"train\.epochs must be an integer"),
    "zero epochs": (PRETRAIN + ["--epochs", "0"], r"train\.epochs must be >= 1"),
    "batch of one": (PRETRAIN + ["--batch-size", "1"], r"train\.batch_size must be >= 2"),
    "negative seed": (PRETRAIN + ["--train.seed", "-1"], r"train\.seed must be in \[0, 4294967295\]"),
    "negative lr": (PRETRAIN + ["--optim.lr", "-1"], r"optim\.lr must be > 0"),
    "bad literal": (PRETRAIN + ["--model.backbone", "vgg"], r"model\.backbone must be one of"),
    "bad bool": (PRETRAIN + ["--train.progress_bar", "maybe"], r"must be true or false"),
    "bad crop scale": (PRETRAIN + ["--augment.crop_scale", "[0.9,0.1]"], r"crop_scale must satisfy"),
    "unknown method": (PRETRAIN + ["--method", "nope"], r"unknown method 'nope'"),
    "another method than the file's": (
        PRETRAIN + ["--config", "digits/simclr", "--method", "byol"],
        r"method_args\.temperature.*/simclr\.yaml's method_args are simclr's: with --method byol, drop them with "
        r"--method_args \{\}",
    ),
    "unknown method arg": (PRETRAIN + ["--method_args.nope", "1"], r"unknown config key\(s\) method_args\.nope"),
    "unknown dataset": (PRETRAIN + ["--dataset", "nope"], r"unknown dataset 'nope'"),
    "dataset a bare folder": (PRETRAIN + ["--dataset", "{data}"], r"is a folder: pass --dataset folder:"),
    "unknown logger": (PRETRAIN + ["--train.loggers", "neptune"], r"unknown train\.loggers 'neptune'"),
    "too many devices": (PRETRAIN + ["--devices", "100000"], r"this machine has \d+ "),
    "bad device ids": (PRETRAIN + ["--devices", "[99999]"], r"ids must be in"),
    "override without value": (PRETRAIN + ["--epochs"], r"--epochs needs a value"),
    "override followed by an option": (
        ["pretrain", "--epochs", "--train.seed", "1"],
        r"--epochs needs a value, but the next argument is the option --train\.seed",
    ),
    "mistyped flag": (PRETRAIN + ["--bogus"], r"unknown option --bogus: .* --section\.key VALUE \(sections: augment"),
    "stray argument": (PRETRAIN + ["oops"], r"unexpected argument 'oops'"),
    "missing config": (
        ["pretrain", "--config", "{tmp}/missing.yaml"],
        r"missing\.yaml not found \(neither a file nor a preset\)",
    ),
    "invalid yaml": (
        ["pretrain", "--config", "{data}/bad.yaml"],
        r"bad\.yaml is not valid YAML: while parsing a flow sequence: expected ',' or '\]', .* at line 2, column 1",
    ),
    "config not utf-8": (
        ["pretrain", "--config", "{data}/latin1.yaml"],
        r"latin1\.yaml is not text: byte 0xe9 at position 5 is not UTF-8 .*; save it as UTF-8",
    ),
    "benchmark config not utf-8": (
        ["benchmark", "--config", "{data}/latin1.yaml", "--out", "{tmp}/bench"],
        r"latin1\.yaml is not text: byte 0xe9",
    ),
    "config key twice": (
        ["pretrain", "--config", "{data}/twice.yaml"],
        r"twice\.yaml is not valid YAML: the key 'lr' is given twice in one mapping at line 4, column 3",
    ),
    "config a folder": (["pretrain", "--config", "{data}"], r"config .* is a folder; pass a YAML file"),
    "nan lr": (PRETRAIN + ["--optim.lr", "nan"], r"optim\.lr must be a number, got 'nan' \(not a number\)"),
    "nan warmup": (PRETRAIN + ["--optim.warmup_epochs", ".nan"], r"optim\.warmup_epochs must be a number, got nan"),
    "infinite lr": (PRETRAIN + ["--optim.lr", ".inf"], r"optim\.lr must be a finite number > 0, got inf"),
    "yaml list": (["pretrain", "--config", "{data}/list.yaml"], r"config must be a mapping"),
    "resume without checkpoint": (PRETRAIN + ["--resume"], r"--resume given but .* does not exist"),
    # --- pretrain: run dir and init
    "run dir is a file": (
        ["pretrain", "--run-dir", "{data}/a-file", "--dataset", "digits"],
        r"a-file is an existing file",
    ),
    "init missing": (PRETRAIN + ["--init", "{tmp}/nowhere"], r"init .*nowhere does not exist"),
    "init wrong type": (PRETRAIN + ["--init", "{data}/weights.txt"], r"unknown file type '\.txt'"),
    "init corrupt ckpt": (PRETRAIN + ["--init", "{data}/corrupt.ckpt"], r"cannot read checkpoint"),
    # --- pretrain: data specs
    "folder missing": (PRETRAIN + ["--dataset", "folder:{tmp}/nowhere"], r"folder .*nowhere does not exist"),
    "folder of text": (PRETRAIN + ["--dataset", "folder:{data}/only-text"], r"no images .* found under"),
    "folder empty": (PRETRAIN + ["--dataset", "folder:{data}/empty"], r"no images .* found under"),
    "folder with one image": (PRETRAIN + ["--dataset", "folder:{data}/single"], r"too few images for a train split"),
    "folder corrupt image": (PRETRAIN + ["--dataset", "folder:{data}/corrupt"], r"cannot read image .*\.png"),
    "huge image": (PRETRAIN + ["--dataset", "folder:{data}/huge"], r"\.png is too large"),
    "npz missing": (PRETRAIN + ["--dataset", "npz:{tmp}/none.npz"], r"npz file .* does not exist"),
    "npz float": (PRETRAIN + ["--dataset", "npz:{data}/npz/float.npz"], r"'x' has dtype float32; convert"),
    "npz nan": (PRETRAIN + ["--dataset", "npz:{data}/npz/nan.npz"], r"'x' has dtype float32"),
    "npz labels out of range": (
        PRETRAIN + ["--dataset", "npz:{data}/npz/labels-out-of-range.npz"],
        r"labels must be >= 0 \(or -1 for unlabeled\)",
    ),
    "npz float labels": (PRETRAIN + ["--dataset", "npz:{data}/npz/float-labels.npz"], r"'y' .* integer"),
    "npz without x": (PRETRAIN + ["--dataset", "npz:{data}/npz/no-x.npz"], r"has no array 'x' \(found: images\)"),
    "npz five channels": (PRETRAIN + ["--dataset", "npz:{data}/npz/five-channels.npz"], r"expected \(N, H, W\)"),
    "npz not square": (PRETRAIN + ["--dataset", "npz:{data}/npz/not-square.npz"], r"only square images"),
    "npz label count": (PRETRAIN + ["--dataset", "npz:{data}/npz/label-count.npz"], r"'y' has shape \(39,\)"),
    "npz garbage": (PRETRAIN + ["--dataset", "npz:{data}/npz/garbage.npz"], r"not an \.npz file \(not a zip archive"),
    "npz text": (PRETRAIN + ["--dataset", "npz:{data}/npz/text.npz"], r"text\.npz is not an \.npz file"),
    "npz objects": (PRETRAIN + ["--dataset", "npz:{data}/npz/objects.npz"], r"cannot read array 'x' .*plain uint8"),
    "npz no images": (PRETRAIN + ["--dataset", "npz:{data}/npz/no-images.npz"], r"'x' holds no images"),
    # --- evaluate
    "evaluate missing run": (["evaluate", "{tmp}/nowhere"], r"run directory .* does not exist"),
    "evaluate no checkpoint": (["evaluate", "{data}/empty"], r"has no checkpoint"),
    # linear and kNN read a checkpoint's config and backbone alone (its weights checked against the config: names
    # and shapes); a suite that builds the method (lipschitz) also checks its name and all of its weights
    "evaluate corrupt ckpt": (["evaluate", "{data}/corrupt.ckpt"], r"cannot read checkpoint"),
    "evaluate unknown method ckpt": (
        ["evaluate", "{data}/unknown-method.ckpt", "--suite", "lipschitz"],
        r"method 'nope'",
    ),
    "evaluate future ckpt": (["evaluate", "{data}/future-version.ckpt"], r"incompatible.*future_key"),
    "evaluate other method weights": (
        ["evaluate", "{data}/other-method-weights.ckpt", "--suite", "lipschitz"],
        r"weights do not match method 'moco' \(\d+ missing keys",
    ),
    "evaluate not probcl ckpt": (["evaluate", "{data}/not-probcl.ckpt"], r"not a probcl checkpoint"),
    "evaluate unknown suite": (["evaluate", "{run}", "--suite", "nope"], r"unknown evaluation suite 'nope'"),
    "evaluate option of other suite": (
        ["evaluate", "{run}", "--suite", "knn", "--option", "linear.x=1"],
        r"options given for suite\(s\) linear that are not being run",
    ),
    "evaluate unknown option": (
        ["evaluate", "{run}", "--suite", "linear", "--option", "linear.nope=1"],
        r"unknown suite option linear\.nope; valid options: probes, sgd",
    ),
    "evaluate malformed option": (
        ["evaluate", "{run}", "--suite", "knn", "--option", "knn"],
        r"must look like SUITE\.KEY=VALUE",
    ),
    "evaluate bad features": (["evaluate", "{run}", "--features", "nope"], r"invalid choice: 'nope'"),
    "evaluate bad feature in a list": (["evaluate", "{run}", "--features", "backbone,nope"], r"invalid choice: 'nope'"),
    "evaluate repeated features": (["evaluate", "{run}", "--features", "pixels,pixels"], r"distinct feature layers"),
    "evaluate unknown device": (["evaluate", "{run}", "--device", "tpu7"], r"unknown device 'tpu7'; use auto, cpu"),
    "evaluate absent gpu": (["evaluate", "{run}", "--device", "cuda:999"], r"device 'cuda:999'.* CUDA GPU"),
    "evaluate negative seed": (["evaluate", "{run}", "--seed", "-2"], r"--seed must be in \[0, 4294967295\]"),
    "evaluate zero batch": (
        ["evaluate", "{run}", "--inference-batch-size", "0"],
        r"--inference-batch-size must be >= 1, got 0",
    ),
    "evaluate no suite named": (["evaluate", "{run}", "--suite", " , "], r"no suite named in ' , '; name one or more"),
    "evaluate zero max-train": (["evaluate", "{run}", "--max-train", "0"], r"--max-train must be >= 1, got 0"),
    # --- score, sample, export, benchmark, list
    "score missing run": (["score", "{tmp}/nowhere", "--dataset", "digits"], r"run directory .* does not exist"),
    "score unknown data": (["score", "{run}", "--dataset", "nope", "--out", "{tmp}/s.csv"], r"unknown dataset 'nope'"),
    "score folder of text": (
        ["score", "{run}", "--dataset", "folder:{data}/only-text", "--out", "{tmp}/s.csv"],
        r"no images",
    ),
    "score absent gpu": (
        ["score", "{run}", "--dataset", "digits", "--device", "cuda:999", "--out", "{tmp}/s.csv"],
        r"device 'cuda:999'.* CUDA GPU",
    ),
    "score bad out type": (["score", "{run}", "--dataset", "digits", "--out", "{tmp}/s.xlsx"], r"\.csv or \.parquet"),
    "sample unknown data": (
        ["sample", "{run}", "--dataset", "nope", "--out", "{tmp}/s.png"],
        r"unknown dataset 'nope'",
    ),
    "sample missing run": (["sample", "{tmp}/nowhere"], r"does not exist"),
    "sample zero samples": (["sample", "{run}", "--num", "0"], r"--num must be >= 1, got 0"),
    "sample negative steps": (["sample", "{run}", "--steps", "-1"], r"--steps must be >= 0, got -1"),
    "sample zero reference": (["sample", "{run}", "--reference", "0"], r"--reference must be >= 1, got 0"),
    "sample nan step size": (["sample", "{run}", "--step-size", "nan"], r"--step-size must be a number, got nan"),
    "sample zero columns": (["sample", "{run}", "--ncols", "0"], r"--ncols must be >= 1, got 0"),
    "sample negative step size": (["sample", "{run}", "--step-size", "-0.1"], r"--step-size must be >= 0, got -0\.1"),
    "sample negative seed": (["sample", "{run}", "--seed", "-1"], r"--seed must be in \[0, 4294967295\], got -1"),
    "export missing run": (["export", "{tmp}/nowhere"], r"run directory .* does not exist"),
    "export corrupt ckpt": (
        ["export", "{data}/corrupt.ckpt", "--out", "{tmp}/w.safetensors"],
        r"cannot read checkpoint",
    ),
    "benchmark missing config": (["benchmark", "--config", "{tmp}/none.yaml"], r"none\.yaml not found"),
    "benchmark given a pretraining config": (
        ["benchmark", "--config", "digits/simclr", "--out", "{tmp}/bench"],
        r"simclr\.yaml is a pretraining config \(one `method`\), not a benchmark: train it with `probcl pretrain",
    ),
    "benchmark bad key": (["benchmark", "--config", "{data}/bench.yaml", "--out", "{tmp}/bench"], r"nonsense_key"),
    "list unknown group": (["list", "nope"], r"invalid choice: 'nope'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_fails_cleanly(case, trained_run, data, tmp_path, capsys, monkeypatch):
    argv, expected = CASES[case]
    if case == "huge image":
        monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # 64x64 is a decompression bomb now
    monkeypatch.chdir(tmp_path)  # a stray relative write would land here and be caught below
    argv = [a.format(tmp=tmp_path, data=data, run=trained_run) for a in argv]
    allowed = tmp_path / "run"
    before = _snapshot(data, trained_run, tmp_path)
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err
    assert code not in (0, None), f"{case}: exit 0\n{err}"
    assert "Traceback" not in err, err
    assert re.search(expected, err, re.S), f"{case}: {err!r} does not match {expected!r}"
    after = _snapshot(data, trained_run, tmp_path)
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    assert all(Path(p).is_relative_to(allowed) for p in changed), f"{case}: files changed: {sorted(changed)}"
    assert not (trained_run / ".lock").exists()


def test_read_only_run_directory(trained_run, tmp_path, capsys, monkeypatch):
    """evaluate on a run directory that cannot be written (EROFS): one line, eval.json untouched."""
    run = tmp_path / "ro"
    shutil.copytree(trained_run, run)
    real_open = os.open

    def read_only(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and str(path).startswith(str(run)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    assert main(["evaluate", str(run), "--suite", "knn"]) != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and re.search(r"cannot write in run directory .*Read-only file system", err)
    assert not (run / "eval.json").exists()


@pytest.mark.parametrize(
    "damage",
    [b'{"knn": {"top1": 8', b"\xff\xfe binary", b"[1, 2]\n{trailing"],
    ids=["cut short", "not text", "trailing garbage"],
)
def test_damaged_eval_json(trained_run, tmp_path, capsys, damage):
    """evaluate on a run whose eval.json was damaged outside probcl: one line naming the file and the fix,
    the file left as it was (the user may want to repair it)."""
    run = tmp_path / "damaged"
    shutil.copytree(trained_run, run)
    (run / "eval.json").write_bytes(damage)
    assert main(["evaluate", str(run), "--suite", "knn"]) != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert re.search(r"cannot read .*eval\.json: .*restore it from a copy, or delete it", err), err
    assert (run / "eval.json").read_bytes() == damage
    assert not (run / ".lock").exists()


@pytest.mark.parametrize(
    ("damaged", "damage", "expected"),
    [
        ("checkpoints/last.ckpt", lambda b: b[:1000], r"cannot resume from .*last\.ckpt: .*zip archive"),
        ("checkpoints/last.ckpt", lambda b: b"garbage" * 100, r"cannot resume from .*last\.ckpt"),
        ("config.yaml", lambda b: b"train: [unclosed\n", r"cannot read .*config\.yaml to resume: .*flow sequence"),
        ("config.yaml", lambda b: b"- a list\n", r"cannot read .*config\.yaml to resume: it holds no config"),
    ],
    ids=["checkpoint cut short", "checkpoint garbled", "config invalid yaml", "config not a mapping"],
)
def test_resume_from_a_damaged_run(trained_run, tmp_path, capsys, damaged, damage, expected):
    """pretrain resuming a run whose checkpoint or saved config was damaged outside probcl: one line naming
    the file and the fixes, nothing changed in the run."""
    run = tmp_path / "damaged"
    shutil.copytree(trained_run, run)
    config = tmp_path / "config.yaml"
    shutil.copyfile(run / "config.yaml", config)  # the run's own settings, to resume it as it was
    (run / damaged).write_bytes(damage((run / damaged).read_bytes()))
    before = _snapshot(run)
    assert main(["pretrain", "--config", str(config), "--run-dir", str(run), "--epochs", "2"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert re.search(expected + r".*restore it from a copy, or start over with --no-resume", err), err
    assert _snapshot(run) == before


def test_resume_after_config_yaml_was_edited_to_another_method(trained_run, tmp_path, capsys):
    """config.yaml says byol, the checkpoint holds a simclr run: the checkpoint's own record of its settings
    refuses the resume in one line (it was a state_dict traceback), and the run is left as it was."""
    import yaml

    run = tmp_path / "edited"
    shutil.copytree(trained_run, run)
    tree = yaml.safe_load((run / "config.yaml").read_text())
    assert tree["method"] == "simclr"
    tree["method"], tree["method_args"] = "byol", {}
    (run / "config.yaml").write_text(yaml.safe_dump(tree))
    config = tmp_path / "config.yaml"
    shutil.copyfile(run / "config.yaml", config)
    before = _snapshot(run)
    assert main(["pretrain", "--config", str(config), "--run-dir", str(run), "--epochs", "2"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert re.search(
        r"last\.ckpt, whose saved config was changed by hand, holds a run trained with other "
        r"settings: .*method.*simclr.*byol",
        err,
    ), err
    assert _snapshot(run) == before


def test_unreadable_json_path_is_a_run_error(tmp_path):
    """A folder where a JSON file should be is named, not a raw IsADirectoryError."""
    from probcl.core.io import read_json
    from probcl.errors import RunError

    (tmp_path / "cell.json").mkdir()
    with pytest.raises(RunError, match=r"cannot read .*cell\.json: Is a directory"):
        read_json(tmp_path / "cell.json")
    assert read_json(tmp_path / "absent.json", {"default": 1}) == {"default": 1}


def test_unusual_images_are_decoded_correctly(tmp_path):
    """Not errors: RGBA, 16-bit and mixed-size images decode to the expected uint8 pixels."""
    from probcl.data.decoding import decode_image

    rgba = np.zeros((4, 4, 4), dtype=np.uint8)
    rgba[..., 0], rgba[..., 3] = 200, 255
    _png(tmp_path / "rgba.png", rgba, "RGBA")
    assert decode_image(tmp_path / "rgba.png", 4, 3)[0].eq(200).all()
    sixteen = np.full((4, 4), 0x8000, dtype=np.uint16)  # half of the 16-bit range
    Image.fromarray(sixteen).save(tmp_path / "16bit.png")
    assert Image.open(tmp_path / "16bit.png").mode.startswith("I")
    assert decode_image(tmp_path / "16bit.png", 4, 1).eq(round(0x8000 / 257)).all()  # 128, not clipped to 255
    _png(tmp_path / "wide.png", np.full((6, 12), 50, dtype=np.uint8))
    assert decode_image(tmp_path / "wide.png", 4, 1).shape == (1, 4, 4)


def test_battery_covers_every_sub_command():
    commands = {argv[0] for argv, _ in CASES.values()}
    assert commands == {"pretrain", "evaluate", "score", "sample", "export", "benchmark", "list"}
    assert len(CASES) + 2 >= 40
    json.dumps(CASES)  # plain data: the list of cases can be printed in a report


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (["--train.strategy", "bogus"], r"invalid strategy name"),
        (["--train.accelerator", "tpu"], r"torch_xla"),  # Lightning raises ImportError for a missing backend
    ],
)
def test_hardware_settings_lightning_refuses_leave_no_run_folder(tmp_path, capsys, setting, expected):
    """Lightning refuses the setting when the trainer is built: one line, and no run folder holding only the
    config of a run that never started."""
    argv = [a.format(tmp=tmp_path) for a in PRETRAIN] + setting
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and re.search(r"train settings rejected by Lightning: .*" + expected, err), err
    assert not (tmp_path / "run").exists()


def test_a_linear_probe_on_too_few_training_images_is_one_line(trained_run, capsys):
    """The probe holds out one image a class (at least) to choose its L2 strength: with fewer training images
    than that it cannot fit (it raised a float overflow). Computing the features first is fine (their cache
    lands in the run); eval.json must not change."""
    before = (trained_run / "eval.json").read_bytes() if (trained_run / "eval.json").exists() else None
    argv = ["evaluate", str(trained_run), "--suite", "linear", "--max-train", "1", "--no-report"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert re.search(r"the linear probe has 1 training image\(s\) for \d+ classes: .*raise max_train", err), err
    after = (trained_run / "eval.json").read_bytes() if (trained_run / "eval.json").exists() else None
    assert after == before


def test_several_nodes_with_nothing_saying_where_the_others_are(tmp_path, capsys, monkeypatch):
    """--num-nodes 2 outside torchrun/SLURM/LSF/MPI and without MASTER_ADDR waited for the missing node forever;
    it is one line before any work. (The variables are cleared: a DDP test in this process may have set them.)"""
    for name in list(os.environ):
        if name.startswith(("MASTER_", "SLURM_", "LSB_", "OMPI_", "TORCHELASTIC_")) or name in ("WORLD_SIZE", "RANK"):
            monkeypatch.delenv(name)
    argv = [a.format(tmp=tmp_path) for a in PRETRAIN] + ["--train.num_nodes", "2"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.search(r"train\.num_nodes=2, but nothing says where the other machines are: .*torchrun", err), err
    assert not (tmp_path / "run").exists()
