"""probcl installs like a library: its wheel, in a fresh virtual environment outside the checkout, lists
the presets it ships, pretrains from one of them and evaluates the run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]
FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")


def run(*args: str | Path, cwd: Path, timeout: float = 300) -> str:
    """Run a command with an environment that does not point Python at the checkout; its stdout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PROBCL_NO_PROGRESS="1", OMP_NUM_THREADS="1")  # one thread: steady timings on a shared machine
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def holds_the_checkouts_probcl(path: Path) -> bool:
    """Whether ``path`` on sys.path would import probcl from the checkout (the checkout itself); a virtual
    environment that lives inside the checkout (``.venv``) holds torch & co., not probcl's sources."""
    package = path / "probcl" / "__init__.py"
    return package.is_file() and package.resolve().is_relative_to(CHECKOUT)


def venv_seeing_this_pythons_packages(venv: Path, cwd: Path) -> None:
    """Make a virtual environment at ``venv`` that sees the packages of the Python running the tests, wherever
    they are: a system Python's site-packages, a virtual environment's, a user's site. (``--system-site-packages``
    would show the *base* interpreter's, which in a virtual environment lacks them.) Its own site-packages comes
    first, so what is installed into it (the wheel) wins; the checkout is left out, so probcl cannot come from it.
    """
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=cwd)
    fresh = "import json, sys; print(json.dumps(sys.path))"  # a fresh process's path: no pytest additions
    outer = json.loads(run(sys.executable, "-c", fresh, cwd=cwd))
    inner = venv / "bin" / "python"
    site_packages = Path(run(inner, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=cwd).strip())
    seen = [p for p in outer if p and Path(p).is_dir() and not holds_the_checkouts_probcl(Path(p))]
    (site_packages / "outer-packages.pth").write_text("\n".join(seen) + "\n")  # appended after its own


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_runs(tmp_path):
    # Build from a copy of the sources the wheel is made of, so the checkout gets no build/ folder.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(CHECKOUT / name, source / name)
    shutil.copytree(CHECKOUT / "probcl", source / "probcl", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path / "dist"
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "-q",
        source,
        "-w",
        dist,
        cwd=tmp_path,
    )
    (wheel,) = dist.glob("probcl-*.whl")

    # torch & co. come from the packages of the Python running these tests; probcl only from the wheel.
    venv = tmp_path / "venv"
    venv_seeing_this_pythons_packages(venv, cwd=tmp_path)
    python, probcl = venv / "bin" / "python", venv / "bin" / "probcl"
    run(python, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", "-q", wheel, cwd=tmp_path)

    work = tmp_path / "work"  # outside the checkout: nothing of it is on the path
    work.mkdir()
    imported = Path(run(python, "-c", "import probcl; print(probcl.__file__)", cwd=work).strip())
    site_packages = Path(
        run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=work).strip()
    )
    assert imported.is_relative_to(site_packages) and site_packages.is_relative_to(venv), imported

    presets = run(probcl, "list", "presets", cwd=work).split()
    assert {"fashion-mnist/simclr", "fashion-mnist/ebclr", "cifar10/simclr", "mnist/ebclr"} <= set(presets)

    dataset = [] if FASHION_MNIST.exists() else ["--dataset", "digits"]  # the preset's data, when installed
    run(
        probcl,
        "pretrain",
        "--config",
        "fashion-mnist/simclr",
        *dataset,
        "--run-dir",
        "run",
        "--epochs",
        "1",
        "--data.train_subset",
        "512",
        "--batch-size",
        "128",
        "--model.width",
        "8",
        "--model.pool",
        "1",
        "--train.progress_bar",
        "false",
        "--train.monitor_train_samples",
        "500",
        "--train.monitor_test_samples",
        "200",
        cwd=work,
    )
    assert (work / "run" / "checkpoints" / "last.ckpt").exists()
    assert len((work / "run" / "metrics.jsonl").read_text().splitlines()) >= 2

    run(probcl, "evaluate", "run", "--suite", "linear", "--max-train", "512", cwd=work)
    linear = json.loads((work / "run" / "eval.json").read_text())["linear"]
    assert 20 < linear["top1"] <= 100  # chance is 10 %
