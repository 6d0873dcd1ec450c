"""`probcl --version` names probcl's version (pyproject.toml's) and the installed torch's, without importing torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import tomllib
import torch

ROOT = Path(__file__).resolve().parents[2]


def test_version_prints_probcl_and_torch():
    code = "import sys\nfrom probcl.cli import main\ntry:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
    code += "print('torch imported' if 'torch' in sys.modules else 'torch not imported')"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    torch_release = torch.__version__.split("+")[0]  # the wheel's local label (+cu130) is not in its metadata
    assert out.splitlines() == [f"probcl {project} (torch {torch_release})", "torch not imported"]
