"""benchmarks/gpu_check.sh end to end on the CPU at tiny sizes: the path a GPU run takes, with its JSON checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_check_runs_on_cpu_at_tiny_sizes(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    cmd = ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--device", "cpu", "--tiny", "--out", str(tmp_path)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "gpu-check.json").read_text())
    assert result["device"] == "cpu" and result["synthetic_data"] is True
    assert set(result["presets"]) == {"fashion-mnist/simclr", "cifar10/simclr-gpu"}
    for config, preset in result["presets"].items():
        rows = preset["rows"]
        bounds = {name: row for name, row in rows.items() if name.startswith("bound")}
        assert len(bounds) == 4, config  # NCHW / channels_last x fp32 / bf16
        assert max(row["of_best_bound"] for row in bounds.values()) == 1.0
        assert rows[preset["best_bound"]]["of_best_bound"] == 1.0
        for name in ("deterministic true", "deterministic false", "deterministic false, kornia views"):
            assert rows[f"probcl pretrain loop, {name}"]["images_per_s"] > 0
        for row in rows.values():  # img/s and ms/step describe the same step
            assert row["ms_per_step"] == pytest.approx(preset["batch_size"] / row["images_per_s"] * 1e3, rel=1e-2)
        assert preset["profile"]["profiled_steps"] == 1 and preset["profile"]["wall_ms_per_step"] > 0
        table = (tmp_path / f"profile-{config.replace('/', '-')}.txt").read_text()
        assert "Self CPU" in table
    overhead = result["step_overhead"]
    assert overhead["loop_ms_per_step"] > 0 and overhead["overhead_ms_per_step"] >= 0
    assert "step overhead" in done.stdout and "of bound" in done.stdout
