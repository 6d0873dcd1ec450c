"""Many processes taking one run directory's lock (`RunLock`) over and over: are there ever two holders?

    python benchmarks/lock_stress.py [--processes 8] [--rounds 150] [--out lock_stress.json]

Each process, once all have started, takes the lock of one run directory ``--rounds`` times, waiting for it when
another has it (as benchmark workers wait for a cell), and while holding it appends ``in PID`` then ``out PID`` to a
shared log (``O_APPEND``: one write each, in the order they happened). The run directory does not exist at first,
so a holder that made it removes it again when it lets go (the case where a waiter found it "an existing file").
Printed and written as JSON: the holds logged, the overlapping holds (an ``in`` while another process is in: must be
0) and the processes that failed (must be none). `tests/core/test_run_lock.py` runs 8 x 150.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORKER = """
import os, sys, time
from probcl.core.run_lock import RunLock
root, log, rounds = sys.argv[1], os.open(sys.argv[2], os.O_WRONLY | os.O_APPEND), int(sys.argv[3])
hold_s, poll_s = float(sys.argv[4]), float(sys.argv[5])
print("ready", flush=True)
sys.stdin.read()  # all start together: when the parent closes the pipe
for _ in range(rounds):
    with RunLock(root, "stress", wait=lambda _: None, poll_s=poll_s):
        os.write(log, f"in {os.getpid()}\\n".encode())
        time.sleep(hold_s)
        os.write(log, f"out {os.getpid()}\\n".encode())
"""


def overlaps(lines: list[str]) -> int:
    """Holds that began while another process held the lock: ``in`` lines met while some ``in`` is not out."""
    holding: set[str] = set()
    count = 0
    for line in lines:
        event, pid = line.split()
        if event == "in":
            count += bool(holding)
            holding.add(pid)
        else:
            holding.discard(pid)
    return count


def stress(workdir: Path, processes: int, rounds: int, hold_s: float = 0.0005, poll_s: float = 0.0005) -> dict:
    """Run ``processes`` workers of ``rounds`` holds each on ``workdir/run``, each hold ``hold_s`` long and a
    lock in use polled every ``poll_s``; the log's verdict."""
    log = workdir / "log"
    log.touch()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-c", WORKER, str(workdir / "run"), str(log), str(rounds), str(hold_s), str(poll_s)]
    go, let_go = os.pipe()  # the workers read ``go`` until the parent closes ``let_go``
    workers, errors = [], []
    for i in range(processes):
        errors.append(workdir / f"stderr-{i}")
        with errors[-1].open("w") as err:
            workers.append(
                subprocess.Popen(command, env=env, cwd=workdir, stdin=go, stdout=subprocess.PIPE, stderr=err, text=True)
            )
    os.close(go)
    for worker in workers:  # each says when it has imported probcl
        assert worker.stdout is not None
        worker.stdout.readline()
    start = time.perf_counter()
    os.close(let_go)  # all start at once
    codes = [worker.wait() for worker in workers]
    seconds = time.perf_counter() - start
    lines = log.read_text().splitlines()
    stderr = [path.read_text() for path in errors]
    failed = [err.strip().splitlines()[-1:] for err, code in zip(stderr, codes, strict=True) if code]
    return {
        "processes": processes,
        "rounds": rounds,
        "hold_s": hold_s,
        "poll_s": poll_s,
        "holds": sum(line.startswith("in ") for line in lines),
        "overlaps": overlaps(lines),
        "takeovers": sum(err.count("taking over") for err in stderr),  # no holder dies here: must be 0
        "failed_processes": len(failed),
        "failures": sorted({line for lines in failed for line in lines}),
        "seconds": round(seconds, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--hold-s", type=float, default=0.0005, help="seconds each hold lasts")
    parser.add_argument("--poll-s", type=float, default=0.0005, help="how often a waiter looks again")
    parser.add_argument("--out", default="lock_stress.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = stress(Path(tmp), args.processes, args.rounds, args.hold_s, args.poll_s)
    result["cpus"] = os.cpu_count()
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=1))
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
