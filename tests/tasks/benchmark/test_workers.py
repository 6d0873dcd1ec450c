"""Several `probcl benchmark` processes on one study: each cell is claimed by one worker, the others move on,
and the last one evaluates what the others' cells made ready (the lock itself: tests/core/test_run_lock.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from probcl.core.io import read_json
from probcl.tasks.benchmark.grid import load_benchmark
from probcl.tasks.benchmark.run import CLAIM_FILE, run_benchmark
from tests.tasks.benchmark.test_run import TINY, write


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


@contextmanager
def other_worker(cell_dir: Path) -> Iterator[subprocess.Popen]:
    """A live process recorded as the worker holding ``cell_dir``'s claim, alive until ``gone`` ends it (at the
    latest when the block ends)."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    cell_dir.mkdir(parents=True, exist_ok=True)
    owner = {"pid": proc.pid, "host": socket.gethostname(), "command": "benchmark"}
    (cell_dir / CLAIM_FILE).write_text(json.dumps(owner))
    try:
        yield proc
    finally:
        gone(proc)


def gone(proc: subprocess.Popen) -> None:
    """End ``proc`` and reap it, so that its pid reads as no longer running at once (not as a zombie)."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    if proc.stdin is not None:
        proc.stdin.close()


def test_a_cell_another_worker_holds_is_left_to_it_and_trained_by_a_later_run(tmp_path):
    bench, base_dir = load_benchmark(_bench(tmp_path, ["linear"]))
    out = tmp_path / "bench"
    with other_worker(out / "cells" / "byol-s0") as other:
        log: list[str] = []
        run_benchmark(bench, base_dir, log=log.append)
        assert f"skipped byol-s0: another worker has it (`probcl benchmark` (pid {other.pid} on " in "\n".join(log)
        assert read_json(out / "cells" / "byol-s0" / "cell.json") is None  # not touched
        assert [c["name"] for c in read_json(out / "results.json")["cells"]] == ["simclr-s0"]
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
    claim_file = out / "cells" / "simclr-s0" / CLAIM_FILE
    log: list[str] = []
    with other_worker(out / "cells" / "simclr-s0") as other:  # "evaluating" simclr-s0 until this one waits for it

        def record(line: str) -> None:
            log.append(line)
            if line.startswith("probcl: waiting for") and str(claim_file) in line:
                gone(other)  # the other worker finishes: the waiting one takes the cell at its next look

        run_benchmark(bench, base_dir, log=record)
    text = "\n".join(log)
    assert "skipped simclr-s0: another worker has it" in text
    assert f"waiting for `probcl benchmark` (pid {other.pid} on " in text and f"release {claim_file}" in text
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
