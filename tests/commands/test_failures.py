"""The CLI's one error path: failures a user can meet end in one line with the fix, never a traceback."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from probcl.cli import main
from probcl.commands._failures import as_probcl_error
from probcl.errors import ConfigError

GLOO_RESET = (
    "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error [127.0.0.1]:38272: Connection reset by "
    "peer. This is typically caused by a remote worker hanging or bugs in the application. GLHF!"
)


def test_known_failures_become_one_line_and_bugs_keep_their_traceback():
    lost = as_probcl_error(RuntimeError(GLOO_RESET), "re-run the same command to resume")
    assert lost is not None and "Read error [127.0.0.1]:38272: Connection reset by peer" in str(lost)
    assert "GLHF" not in str(lost) and str(lost).endswith("re-run the same command to resume")
    full = as_probcl_error(OSError(errno.ENOSPC, "No space left on device"))
    assert full is not None and "disk is full" in str(full)
    assert as_probcl_error(KeyboardInterrupt()).exit_code == 130
    error = ConfigError("x")
    assert as_probcl_error(error) is error
    assert as_probcl_error(RuntimeError("shape mismatch")) is None  # a bug: its traceback is kept
    assert as_probcl_error(OSError(errno.EACCES, "denied")) is None


def test_the_cli_prints_one_line_for_a_known_failure(monkeypatch, capsys):
    import probcl.commands.list as list_command

    def fail(args, extra):
        raise RuntimeError(GLOO_RESET)

    monkeypatch.setattr(list_command, "run", fail)
    assert main(["list"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("probcl: error: a process of this multi-process run stopped")


@pytest.mark.parametrize(
    ("command", "failure", "ending"),
    [
        ("evaluate", KeyboardInterrupt(), "the suites that finished are saved in eval.json"),
        ("score", OSError(errno.ENOSPC, "No space left on device"), "the output file is written only once every"),
        ("pretrain", KeyboardInterrupt(), "re-run the same command to resume from the last checkpoint"),
        ("benchmark", KeyboardInterrupt(), "finished cells are kept, and a cell in progress resumes from its last"),
    ],
)
def test_the_line_after_a_stop_says_what_a_rerun_of_that_command_does(monkeypatch, capsys, command, failure, ending):
    """Only a pretraining run (alone or in a benchmark's cell) resumes from a checkpoint: a Ctrl-C or a full disk
    in `evaluate` or `score` must not promise one."""
    import importlib

    module = importlib.import_module(f"probcl.commands.{command}")

    def fail(args, extra):
        raise failure

    monkeypatch.setattr(module, "run", fail)
    argv = {"evaluate": ["run"], "score": ["run", "--dataset", "digits"], "benchmark": ["--config", "c.yaml"]}
    assert main([command, *argv.get(command, [])]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ending in err
    assert ("checkpoint" in err) == (command in ("pretrain", "benchmark"))


def _rank_one(rank0: int) -> int:
    """The pid of rank 0's child that Lightning launched as rank 1 (``LOCAL_RANK=1`` in its environment)."""
    children = Path(f"/proc/{rank0}/task/{rank0}/children").read_text().split()
    ranks = [int(c) for c in children if b"LOCAL_RANK=1\0" in Path(f"/proc/{c}/environ").read_bytes()]
    assert len(ranks) == 1, f"rank 0's children {children}: {len(ranks)} with LOCAL_RANK=1"
    return ranks[0]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="finds the rank-1 process through Linux's /proc")
def test_a_killed_ddp_rank_ends_the_run_with_one_line_naming_how_to_resume(tmp_path):
    """Two CPU ranks (gloo); rank 1 is killed with SIGKILL once both train; rank 0 ends (it notices the lost peer at
    its next collective; no deadline: the test waits for the process to end), with one line."""
    run = tmp_path / "run"
    command = [sys.executable, "-m", "probcl.cli", "pretrain", "--config", "fashion-mnist/simclr"]
    command += ["--dataset", "digits", "--devices", "2", "--strategy", "ddp", "--accelerator", "cpu"]
    command += ["--run-dir", str(run), "--train.epochs", "50", "--train.batch_size", "32", "--model.width", "8"]
    env = {**os.environ, "PROBCL_NO_PROGRESS": "1"}
    stderr = tmp_path / "stderr"
    with stderr.open("w") as err:  # a file, not a pipe: nobody has to drain it while the test waits
        rank0 = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        while not (run / "checkpoints" / "last.ckpt").exists():  # the first epoch is done: both ranks train
            assert rank0.poll() is None, f"the 2-rank run ended before training:\n{stderr.read_text()[-3000:]}"
            time.sleep(0.5)
        os.kill(_rank_one(rank0.pid), signal.SIGKILL)
        rank0.wait()
    finally:
        if rank0.poll() is None:
            rank0.kill()
            rank0.wait()
    err_text = stderr.read_text()
    assert rank0.returncode == 1, err_text[-2000:]
    assert "Traceback" not in err_text, err_text[-3000:]
    last = err_text.strip().splitlines()[-1]
    assert last.startswith("probcl: error: a process of this multi-process run stopped or lost its connection")
    assert last.endswith("re-run the same command to resume from the last checkpoint (exactly where it left off)")
