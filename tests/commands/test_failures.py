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


def test_a_name_too_long_for_the_file_system_is_one_line_in_every_command(tmp_path, capsys):
    """Python's Path.exists() raises ENAMETOOLONG for a name over the file system's limit (255 bytes on most):
    each command's first look at the path would end in a traceback."""
    long = str(tmp_path / ("L" * 300))
    for argv in (["evaluate", long], ["pretrain", "--config", long + ".yaml"], ["export", long]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "too long for the file system" in err and "shorter name" in err, err


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


SIGTERMED_COMMAND = """
import sys, time
from pathlib import Path
import probcl.commands.score as score_command
from probcl.cli import main
from probcl.core.io import atomic_write
from probcl.core.run_lock import RunLock

def run(args, extra):
    root = Path(sys.argv[1])
    with RunLock(root, "probcl score"):
        def write(fh):
            fh.write(b"half an output")
            print("writing", flush=True)
            time.sleep(60)
        atomic_write(root / "scores.csv", write)
    return 0

score_command.run = run
sys.exit(main(["score", "unused-run", "--dataset", "digits"]))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM is a POSIX signal")
def test_a_sigterm_unwinds_the_command_releases_its_lock_and_removes_its_temporary_file(tmp_path):
    """Python's default for SIGTERM kills at once (no ``finally``): the run's .lock and the half-written temporary
    file would stay. probcl's entry point turns SIGTERM into a stop like Ctrl-C's: exit 143 (128 + SIGTERM, what a
    shell reports for a killed process) and one line with what a rerun of that command does."""
    run = tmp_path / "run"
    command = subprocess.Popen(
        [sys.executable, "-c", SIGTERMED_COMMAND, str(run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert command.stdout is not None and command.stdout.readline() == "writing\n"
        assert (run / ".lock").exists() and [p.name for p in run.glob(".scores.csv.*.tmp")]
        command.send_signal(signal.SIGTERM)
        _, err = command.communicate(timeout=60)
    finally:
        if command.poll() is None:
            command.kill()
    assert command.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines() == [
        "probcl: terminated: stopped by SIGTERM; run the same command again "
        "(the output file is written only once every image is scored)"
    ]
    assert not run.exists() or sorted(p.name for p in run.iterdir()) == []  # no lock, no temporary, no output


def test_a_sigterm_during_pretraining_is_left_to_lightnings_graceful_stop():
    """Inside ``sigterm_deferred`` (around ``Trainer.fit``) the handler returns: Lightning's connector, which calls
    the handler it found after its own, stops the loop after the step and the state is saved (tests/runs)."""
    from probcl.core.termination import Terminated, sigterm_deferred, sigterm_raises

    with sigterm_raises():
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        with sigterm_deferred():
            handler(signal.SIGTERM, None)  # returns: no exception
        with pytest.raises(Terminated):
            handler(signal.SIGTERM, None)
    assert signal.getsignal(signal.SIGTERM) is not handler  # the previous handler is back
