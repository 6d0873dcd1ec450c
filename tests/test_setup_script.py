"""scripts/setup.sh builds the right pip commands: the lock's versions, and with PROBCL_TORCH=cpu PyTorch's CPU-only
wheels from PyTorch's CPU index first. Checked with a stand-in Python that records what it is asked to run (no
network, nothing installed); the real install is what ./test.sh runs."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"

FAKE_PYTHON = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$CALLS"
case "$*" in
  *"--index-url"*) exit "${FAIL_INDEX:-0}" ;;
  *"torch.version.cuda"*) exit "${CUDA_BUILD:-0}" ;;
esac
"""


def lock_version(name: str) -> str:
    (version,) = re.findall(rf"^{name}==(\S+)$", (ROOT / "requirements" / "lock.txt").read_text(), re.M)
    return version


def setup(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run scripts/setup.sh with the stand-in Python; its result and the Python commands it ran, in order."""
    python, calls = tmp_path / "python", tmp_path / "calls"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    calls.touch()
    outer = {k: v for k, v in os.environ.items() if not k.startswith("PROBCL_TORCH")}
    env = {**outer, "PYTHON": str(python), "CALLS": str(calls), "PROBCL_DATA": str(tmp_path), **env}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], env=env, capture_output=True, text=True)
    return done, calls.read_text().splitlines()


PROJECT = "-m pip install -q --disable-pip-version-check -c requirements/lock.txt -e .[dev]"
IMPORTS = "-c import probcl, torch, torchvision, lightning, kornia"


def test_by_default_pip_installs_the_locked_versions(tmp_path):
    done, calls = setup(tmp_path)
    assert done.returncode == 0, done.stderr
    assert calls == [PROJECT, IMPORTS]


def test_cpu_torch_comes_from_pytorchs_cpu_index_at_the_locked_versions(tmp_path):
    done, calls = setup(tmp_path, PROBCL_TORCH="cpu")
    assert done.returncode == 0, done.stderr
    if platform.system() != "Linux":  # PyPI's torch has no CUDA there: the default install
        assert calls == [PROJECT, IMPORTS]
        return
    torch, torchvision = lock_version("torch"), lock_version("torchvision")
    cpu_wheels = f"-m pip install -q --disable-pip-version-check --no-deps --index-url {CPU_INDEX} "
    cpu_wheels += f"torch=={torch}+cpu torchvision=={torchvision}+cpu"
    assert calls[:3] == [cpu_wheels, PROJECT, IMPORTS]  # first: then the lock's `torch==` is met by `+cpu`
    assert calls[3] == "-c import sys, torch; sys.exit(torch.version.cuda is not None)"
    assert len(calls) == 4
    (tmp_path / "calls").unlink()
    _, calls = setup(tmp_path, PROBCL_TORCH="cpu", PROBCL_TORCH_CPU_INDEX="file:///srv/torch-cpu")  # a mirror
    assert calls[0] == cpu_wheels.replace(CPU_INDEX, "file:///srv/torch-cpu")


@pytest.mark.skipif(platform.system() != "Linux", reason="PROBCL_TORCH=cpu changes nothing off Linux")
def test_cpu_torch_that_does_not_install_is_one_clear_error(tmp_path):
    done, calls = setup(tmp_path, PROBCL_TORCH="cpu", FAIL_INDEX="1")
    assert done.returncode == 1 and len(calls) == 1
    assert f"error: PyTorch's CPU-only wheels did not install from {CPU_INDEX}" in done.stderr
    done, _ = setup(tmp_path, PROBCL_TORCH="cpu", CUDA_BUILD="1")  # installed, but pip kept a CUDA build
    assert done.returncode == 1
    assert "error: PROBCL_TORCH=cpu, but the torch installed is a CUDA build" in done.stderr


def test_an_unknown_torch_variant_is_refused_before_anything_is_installed(tmp_path):
    done, calls = setup(tmp_path, PROBCL_TORCH="cuda")
    assert done.returncode == 2 and calls == []
    assert "error: PROBCL_TORCH=cuda: set it to cpu" in done.stderr


def test_getting_started_names_the_locked_cpu_versions():
    page = (ROOT / "docs" / "getting-started.md").read_text()
    torch, torchvision = lock_version("torch"), lock_version("torchvision")
    command = next(line for line in page.splitlines() if line.startswith("PROBCL_TORCH=cpu bash scripts/setup.sh"))
    assert command.endswith(f"# torch=={torch}+cpu, torchvision=={torchvision}+cpu, then the lock")
