"""A reader that closes the pipe early (``probcl list | head -1``) ends probcl quietly, with no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_closed_stdout_pipe_exits_quietly():
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before probcl writes a byte: its first write meets a closed pipe
    try:
        done = subprocess.run(
            [sys.executable, "-m", "probcl.cli", "list", "presets"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 1
    assert done.stderr == ""
