"""Re-running a benchmark over its published cells changes nothing: a fresh copy of a published study (a git
checkout of it) restores every cell and rebuilds results.json and the reports byte for byte, logs no training for
a restored cell, and each cell's provenance is the machine and code it ran with, not the restoring one."""

from __future__ import annotations

import subprocess
from datetime import datetime

import torch

import probcl
from probcl.core.io import read_json
from probcl.tasks.benchmark.grid import load_benchmark
from probcl.tasks.benchmark.results import RESTORED_FILE
from probcl.tasks.benchmark.run import run_benchmark
from tests.tasks.benchmark.test_run import TINY, write


def git(repo, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_restoring_a_published_study_in_a_fresh_copy_leaves_the_checkout_clean(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    published = repo / "docs" / "results" / "tiny"
    bench_file = write(
        tmp_path / "tiny.yaml",
        {
            "title": "tiny",
            "out": str(tmp_path / "first-session"),
            "publish": str(published),
            "methods": {"simclr": "fashion-mnist/simclr"},
            "overrides": TINY,
            "seeds": [0, 1],
            "suites": ["linear"],
            "eval": {"max_train": 200},
        },
    )
    bench, base_dir = load_benchmark(bench_file)
    run_benchmark(bench, base_dir, log=lambda line: None)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the published study")

    # each cell recorded where and with what it ran
    record = read_json(published / "cells" / "simclr-s0" / "cell.json")
    ran = record["provenance"]
    assert ran["torch_threads"] == torch.get_num_threads() and ran["code"]["probcl"] == probcl.__version__
    assert datetime.fromisoformat(ran["finished"]).tzinfo is not None
    results = read_json(published / "results.json")
    assert [c["provenance"] for c in results["cells"]] == [
        read_json(published / "cells" / name / "cell.json")["provenance"] for name in ("simclr-s0", "simclr-s1")
    ]
    assert "created" not in results and "hardware" not in results  # nothing of the machine that rebuilt it
    assert results["provenance"]["machines"][0]["cells"] == 2 and results["provenance"]["not_recorded"] == 0

    # a later session, on a fresh copy: no working folder, only the published files
    fresh = tmp_path / "second-session"
    log: list[str] = []
    run_benchmark(bench, base_dir, out=fresh, log=log.append)
    assert [line for line in log if line.startswith("restored")] == [
        f"restored simclr-s{s} from {published / 'cells' / f'simclr-s{s}'}" for s in (0, 1)
    ]
    steps = [line for line in log if line.startswith("[")]
    assert steps == [f"[{i}/2] done simclr-s{i - 1}: restored from the published copy" for i in (1, 2)]
    assert git(repo, "status", "--porcelain") == ""  # no cell.json, results.json or report rewritten
    for s in (0, 1):
        cell = fresh / "cells" / f"simclr-s{s}"
        assert (cell / "cell.json").read_bytes() == (published / "cells" / f"simclr-s{s}" / "cell.json").read_bytes()
        assert read_json(cell / RESTORED_FILE) == {"from": str(published / "cells" / f"simclr-s{s}")}
        assert not (published / "cells" / f"simclr-s{s}" / RESTORED_FILE).exists()
    # and a third run over the restored working copy: still nothing to do, nothing changed
    run_benchmark(bench, base_dir, out=fresh, log=log.append)
    assert git(repo, "status", "--porcelain") == ""
