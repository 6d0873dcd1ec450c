"""Run directories: one writer at a time, stale locks taken over, --no-resume moves the old run aside."""

import json
import os
import socket
import subprocess
import sys

import pytest
from conftest import reproducible_rows

from probcl.core.layout import RunPaths
from probcl.core.run_lock import RunLock
from probcl.errors import RunError
from probcl.tasks.pretrain import pretrain


def _write_lock(root, pid: int, host: str | None = None) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / ".lock").write_text(json.dumps({"pid": pid, "host": host or socket.gethostname(), "command": "pretrain"}))


def test_a_live_writer_blocks_a_second_one(tmp_path):
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _write_lock(tmp_path / "run", live.pid)
        with pytest.raises(RunError, match=f"in use by `probcl pretrain` \\(pid {live.pid} on "):
            with RunLock(tmp_path / "run", "evaluate"):
                pass
    finally:
        live.kill()
        live.wait()
    assert json.loads((tmp_path / "run" / ".lock").read_text())["pid"] == live.pid  # untouched


def test_a_lock_of_another_host_is_respected(tmp_path):
    _write_lock(tmp_path / "run", os.getpid(), host="some-other-node")
    with pytest.raises(RunError, match="some-other-node"):
        with RunLock(tmp_path / "run", "pretrain"):
            pass


def test_a_stale_lock_is_taken_over_and_said_so(tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _write_lock(tmp_path / "run", dead.pid)
    with RunLock(tmp_path / "run", "pretrain"):
        owner = json.loads((tmp_path / "run" / ".lock").read_text())
        assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname()
    assert f"its owner (pid {dead.pid}) is no longer running" in capsys.readouterr().err
    assert not (tmp_path / "run" / ".lock").exists()


def test_the_same_process_cannot_write_a_run_twice(tmp_path):
    with RunLock(tmp_path / "run", "pretrain"):
        with pytest.raises(RunError, match="in use"):
            with RunLock(tmp_path / "run", "pretrain"):
                pass


def test_no_resume_moves_the_old_run_aside(tiny_config, capsys):
    cfg = tiny_config(run_name="again")
    paths = RunPaths(pretrain(cfg))
    (paths.eval).write_text("{}\n")
    old_rows = paths.metrics.read_text()
    pretrain(cfg, resume=False)
    moved = [p for p in paths.root.iterdir() if p.name.startswith("previous-")]
    assert len(moved) == 1
    assert f"moved to {moved[0]}" in capsys.readouterr().err
    assert (moved[0] / "metrics.jsonl").read_text() == old_rows
    assert (moved[0] / "eval.json").exists() and (moved[0] / "checkpoints" / "last.ckpt").exists()
    assert not paths.eval.exists()  # the new run starts without the old results
    assert reproducible_rows(paths.metrics.read_text()) == reproducible_rows(old_rows)  # same seed, rows once
