"""Several `probcl benchmark` processes on one study: each cell is claimed by one worker, the others move on,
and the last one evaluates what the others' cells made ready; one writer of the lock at a time."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

from test_benchmark import TINY, write

from probcl.core.io import read_json
from probcl.tasks.benchmark import CLAIM_FILE, run_benchmark
from probcl.tasks.benchmark_grid import load_benchmark


def _bench(tmp_path: Path, suites: list[str], seeds: list[int] | None = None) -> str:
    return write(
        tmp_path / "tiny.yaml",
        {
            "title": "tiny",
            "out": str(tmp_path / "bench"),
            "methods": {"simclr": "fashion-mnist/simclr", "byol": "fashion-mnist/byol"},
            "overrides": TINY,
            "seeds": seeds or [0],
            "suites": suites,
            "eval": {"max_train": 200},
        },
    )


def _other_worker(cell_dir: Path, seconds: float) -> subprocess.Popen:
    """A live process recorded as the worker holding ``cell_dir`` (reaped when it exits, so it reads as gone)."""
    proc = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])
    cell_dir.mkdir(parents=True, exist_ok=True)
    owner = {"pid": proc.pid, "host": socket.gethostname(), "command": "benchmark"}
    (cell_dir / CLAIM_FILE).write_text(json.dumps(owner))
    threading.Thread(target=proc.wait, daemon=True).start()
    return proc


def test_a_cell_another_worker_holds_is_left_to_it_and_trained_by_a_later_run(tmp_path):
    bench, base_dir = load_benchmark(_bench(tmp_path, ["linear"]))
    out = tmp_path / "bench"
    other = _other_worker(out / "cells" / "byol-s0", 600)
    try:
        log: list[str] = []
        run_benchmark(bench, base_dir, log=log.append)
        assert f"skipped byol-s0: another worker has it (`probcl benchmark` (pid {other.pid} on " in "\n".join(log)
        assert read_json(out / "cells" / "byol-s0" / "cell.json") is None  # not touched
        assert [c["name"] for c in read_json(out / "results.json")["cells"]] == ["simclr-s0"]
    finally:
        other.kill()
    stamp = (out / "cells" / "simclr-s0" / "cell.json").stat().st_mtime_ns
    log.clear()
    run_benchmark(bench, base_dir, log=log.append)  # the other worker is gone: its claim is taken over
    assert {c["name"] for c in read_json(out / "results.json")["cells"]} == {"simclr-s0", "byol-s0"}
    assert read_json(out / "cells" / "byol-s0" / "cell.json")["started_at_epoch"] == 0
    assert (out / "cells" / "simclr-s0" / "cell.json").stat().st_mtime_ns == stamp  # not trained again
    assert not list(out.glob("cells/*/" + CLAIM_FILE))  # every claim released


def test_the_last_worker_waits_for_a_cell_another_is_evaluating_then_runs_what_is_missing(tmp_path):
    bench, base_dir = load_benchmark(_bench(tmp_path, ["linear"]))
    run_benchmark(bench, base_dir, log=lambda _: None)
    bench, _ = load_benchmark(_bench(tmp_path, ["linear", "knn"]))  # a suite added: both cells lack it
    out = tmp_path / "bench"
    _other_worker(out / "cells" / "simclr-s0", 3)  # "evaluating" simclr-s0 for 3 s
    log: list[str] = []
    run_benchmark(bench, base_dir, log=log.append)
    text = "\n".join(log)
    assert "skipped simclr-s0: another worker has it" in text
    claim_file = out / "cells" / "simclr-s0" / CLAIM_FILE
    assert "waiting for `probcl benchmark` (pid " in text and f"release {claim_file}" in text
    assert "evaluated simclr-s0: knn" in text and "evaluated byol-s0: knn" in text
    results = read_json(out / "results.json")
    assert all("knn/top1" in c["metrics"] for c in results["cells"])


def test_two_workers_at_once_share_the_cells_and_both_finish(tmp_path):
    bench_file = _bench(tmp_path, ["linear"], seeds=[0, 1])
    cmd = [sys.executable, "-c", "from probcl.cli import main; raise SystemExit(main())", "benchmark", "--config"]
    cmd.append(bench_file)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    workers = [subprocess.Popen(cmd, env=env, **pipes) for _ in "ab"]
    outputs = [w.communicate(timeout=600)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs
    out = tmp_path / "bench"
    results = read_json(out / "results.json")
    assert {c["name"] for c in results["cells"]} == {"simclr-s0", "byol-s0", "simclr-s1", "byol-s1"}
    assert all("linear/top1" in c["metrics"] for c in results["cells"])
    for name in ("simclr-s0", "byol-s0", "simclr-s1", "byol-s1"):  # each trained once, from its first epoch
        record = read_json(out / "cells" / name / "cell.json")
        assert record["started_at_epoch"] == 0 and "seconds_per_epoch" in record
        assert not list((out / "cells" / name).glob("previous-*"))
    assert not list(out.glob("cells/*/" + CLAIM_FILE)) and not (out / ".report.lock").exists()


LOCK_LOOP = """
import os, sys, time
from probcl.core.run_lock import RunLock
root, log_path = sys.argv[1], sys.argv[2]
for _ in range(40):
    with RunLock(root, "test", wait=lambda _: None, poll_s=0.0005):
        with open(log_path, "a") as fh:
            fh.write(f"in {os.getpid()}\\n")
        time.sleep(0.0005)
        with open(log_path, "a") as fh:
            fh.write(f"out {os.getpid()}\\n")
"""


def test_processes_that_wait_for_one_lock_hold_it_one_at_a_time(tmp_path):
    log_path = tmp_path / "log"
    procs = [
        subprocess.Popen([sys.executable, "-c", LOCK_LOOP, str(tmp_path / "run"), str(log_path)]) for _ in range(3)
    ]
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0]
    lines = log_path.read_text().split("\n")[:-1]
    assert len(lines) == 3 * 40 * 2
    for enter, leave in zip(lines[::2], lines[1::2], strict=True):  # never two holders: in/out pairs of one pid
        assert enter.startswith("in ") and leave == "out " + enter[3:]
