"""Training throughput of a preset: the compute bounds in both precisions next to what the pipeline and the CLI achieve.

    python benchmarks/throughput.py --config fashion-mnist/simclr --steps 30 --repeats 2

Rows (images = pairs of views per second, best of ``repeats``):

- bound eager / channels_last / compiled, fp32 and bf16: forward + backward + optimiser step on pre-made
  views (NCHW; NHWC; NHWC with ``torch.compile`` of the backbone), with the forward pass in float32 or under
  bf16 autocast (what ``precision: bf16-mixed`` runs); the best of them is the machine's bound for this
  model (on a CPU without AVX512-BF16/AMX bf16 is emulated and its bounds are low);
- in-process pipeline: DataLoader + views + step, with the preset's memory format, in the precision
  ``train.precision`` resolves to on this machine;
- ``probcl pretrain`` (subprocess, monitor off, the preset's ``train.precision``): the steady-state rate from
  two runs of different lengths (their time difference over their step difference), as a fraction of the best
  bound, and the fixed cost (start-up to the first step plus the final checkpoint) as the longer run's time
  minus its steps at that rate.

The JSON records the CPU's capability (``torch.backends.cpu.get_cpu_capability()``), its bf16 flags and the
precision the CLI chose. GFLOP/s use the FLOPs of one step counted by ``torch.utils.flop_counter.FlopCounterMode``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch
from common import optimiser_step
from torch.utils.data import DataLoader
from torch.utils.flop_counter import FlopCounterMode

from probcl.config import Config, load_config
from probcl.core.io import atomic_write_json
from probcl.core.presets import resolve_config_path
from probcl.data.info import data_info_for
from probcl.data.loaders import load_dataset
from probcl.methods import METHODS
from probcl.runtime.devices import resolve_device
from probcl.runtime.precision import cpu_bf16_flags, resolve_precision

ROOT = Path(__file__).resolve().parent.parent


def build(cfg: Config, train, device: torch.device, channels_last: bool, compiled: bool):
    """The preset's model (memory format and compilation as given) and an Adam optimiser."""
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, channels_last=channels_last))
    torch.manual_seed(0)
    model = METHODS.get(cfg.method)(cfg.to_dict(), asdict(data_info_for(cfg, train))).to(device).train()
    if compiled:
        model.backbone.compile()
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def rate(step, batches: list, batch_size: int, steps: int, warmup: int) -> float:
    """Images per second of ``step`` cycling over ``batches``, after ``warmup`` untimed steps."""
    for i in range(warmup):
        step(batches[i % len(batches)])
    _sync()
    start = time.perf_counter()
    for i in range(steps):
        step(batches[i % len(batches)])
    _sync()
    return steps * batch_size / (time.perf_counter() - start)


def precision_context(name: str, device: torch.device):
    """A factory of the forward pass's context: nothing for fp32, bf16 autocast for bf16."""
    if name == "fp32":
        return contextlib.nullcontext
    return lambda: torch.autocast(device.type, dtype=torch.bfloat16)


def step_flops(model, optimizer, views) -> int:
    with FlopCounterMode(display=False) as counter:
        optimiser_step(model, optimizer, *views)
    return counter.get_total_flops()


@dataclasses.dataclass(frozen=True)
class CliRun:
    """One `probcl pretrain` process: its wall time, the precision line it printed, and its start-up clock
    (seconds from process start to the first step, and the first step's own time)."""

    seconds: float
    precision: str
    startup_seconds: float
    first_step_seconds: float


FIRST_STEP = re.compile(r"first step began ([0-9.]+) s after start and took ([0-9.]+) s")


def cli_run(config: str, batches: int, threads: int, precision: str | None) -> CliRun:
    """Run `probcl pretrain` (monitor off, one epoch of ``batches`` steps; ``precision`` overrides the preset's
    ``train.precision`` when given) in a fresh process."""
    with tempfile.TemporaryDirectory() as run_dir:
        cmd = [
            sys.executable,
            "-m",
            "probcl.cli",
            "pretrain",
            "--config",
            config,
            "--run-dir",
            run_dir,
            "--no-resume",
            "--train.epochs",
            "1",
            "--train.limit_train_batches",
            str(batches),
            "--train.monitor_every_n_epochs",
            "0",
            "--train.progress_bar",
            "false",
            *(["--train.precision", precision] if precision else []),
        ]
        env = {
            **os.environ,
            "PROBCL_NO_PROGRESS": "1",
            "OMP_NUM_THREADS": str(threads),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        start = time.perf_counter()
        proc = subprocess.run(cmd, check=False, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        seconds = time.perf_counter() - start
        if proc.returncode:
            sys.exit(f"probcl pretrain failed (exit {proc.returncode}):\n{proc.stderr.decode()[-3000:]}")
        stderr = proc.stderr.decode()
        lines = [line for line in stderr.splitlines() if line.startswith("probcl: precision")]
        first = FIRST_STEP.search(stderr)
        return CliRun(
            seconds,
            lines[0].removeprefix("probcl: ") if lines else "unknown",
            float(first.group(1)) if first else float("nan"),
            float(first.group(2)) if first else float("nan"),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="fashion-mnist/simclr")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cli-steps", default="10,60", help="the two run lengths (steps) of the CLI measurement")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile bounds")
    parser.add_argument("--precisions", default="fp32,bf16", help="bounds in these precisions (fp32, bf16)")
    parser.add_argument(
        "--cli-precision", default=None, help="run the CLI at this train.precision (default: the preset's)"
    )
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", default="benchmarks/results/throughput.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    load_start = round(os.getloadavg()[0], 2)  # other jobs on the machine make every rate lower
    cfg = load_config(resolve_config_path(args.config))
    batch_size = cfg.train.batch_size
    train = load_dataset(cfg.data.dataset, "train")
    loader = DataLoader(train, batch_size=batch_size, shuffle=True, drop_last=True)
    images = [x.to(device) for _, (x, _, _) in zip(range(4), loader)]

    variants = {"eager (NCHW)": (False, False), "channels_last": (True, False)}
    if not args.no_compile:
        variants["compiled (channels_last)"] = (True, True)
    rows: dict[str, dict] = {}
    flops = None
    for precision in args.precisions.split(","):
        for name, (channels_last, compiled) in variants.items():
            model, optimizer = build(cfg, train, device, channels_last, compiled)
            views = [model.training_views(x) for x in images]
            if flops is None:
                flops = step_flops(model, optimizer, views[0])

            forward_context = precision_context(precision, device)

            def train_step(v, model=model, optimizer=optimizer, ctx=forward_context) -> None:
                view1, view2 = v
                optimiser_step(model, optimizer, view1, view2, precision=ctx)

            best = max(rate(train_step, views, batch_size, args.steps, args.warmup) for _ in range(args.repeats))
            rows[f"bound {name} {precision}"] = {"images_per_s": best}

    chosen = resolve_precision(args.cli_precision or cfg.train.precision, device)
    model, optimizer = build(cfg, train, device, cfg.train.channels_last, cfg.train.compile)
    ctx = precision_context("bf16" if chosen.bf16 else "fp32", device)

    def pipeline_step(x: torch.Tensor) -> None:
        view1, view2 = model.training_views(x)
        optimiser_step(model, optimizer, view1, view2, precision=ctx)

    rows[f"in-process pipeline (views + step) {'bf16' if chosen.bf16 else 'fp32'}"] = {
        "images_per_s": max(
            rate(pipeline_step, images, batch_size, args.steps, args.warmup) for _ in range(args.repeats)
        )
    }

    assert flops is not None, "--precisions names no precision"
    short, long = (int(s) for s in args.cli_steps.split(","))
    cli_rates, overheads, startups = [], [], []
    cli_precision = "unknown"
    for _ in range(args.repeats):
        short_run = cli_run(args.config, short, args.threads, args.cli_precision)
        long_run = cli_run(args.config, long, args.threads, args.cli_precision)
        cli_precision = long_run.precision
        startups += [short_run, long_run]
        t_short, t_long = short_run.seconds, long_run.seconds
        cli_rate = (long - short) * batch_size / max(t_long - t_short, 1e-9)
        cli_rates.append(cli_rate)
        overheads.append(t_long - long * batch_size / cli_rate)
    best_i = max(range(len(cli_rates)), key=cli_rates.__getitem__)
    rows["probcl pretrain (CLI, steady state)"] = {"images_per_s": cli_rates[best_i]}

    best_name, best_bound = max(
        ((n, r["images_per_s"]) for n, r in rows.items() if n.startswith("bound")), key=lambda item: item[1]
    )
    for row in rows.values():
        row["gflop_per_s"] = round(row["images_per_s"] / batch_size * flops / 1e9, 1)
        row["of_best_bound"] = round(row["images_per_s"] / best_bound, 3)
        row["images_per_s"] = round(row["images_per_s"], 1)
    result = {
        "config": args.config,
        "method": cfg.method,
        "backbone": cfg.model.backbone,
        "width": cfg.model.width,
        "batch_size": batch_size,
        "device": str(device),
        "threads": args.threads,
        "cpu": platform.processor() or platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_bf16_flags": sorted(cpu_bf16_flags()),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "load_average_1min": {"start": load_start, "end": round(os.getloadavg()[0], 2)},
        "gflop_per_step": round(flops / 1e9, 2),
        "rows": rows,
        "best_bound": best_name,
        "cli_precision": cli_precision,
        "cli_of_best_bound": rows["probcl pretrain (CLI, steady state)"]["of_best_bound"],
        "cli_fixed_seconds": round(overheads[best_i], 1),
        "cli_fixed_seconds_note": "start-up to the first step + final checkpoint, from two run lengths",
        "cli_startup_seconds": min(run.startup_seconds for run in startups),
        "cli_startup_seconds_note": "process start to the first optimiser step (best of the CLI runs)",
        "cli_first_step_seconds": min(run.first_step_seconds for run in startups),
        "note": "images = pairs of views; best of repeats",
    }
    print(
        f"{args.config}: {cfg.model.backbone} width {cfg.model.width}, batch {batch_size}, {device}, "
        f"{args.threads} threads, {result['gflop_per_step']} GFLOP/step, CPU capability {result['cpu_capability']} "
        f"(bf16 flags: {', '.join(result['cpu_bf16_flags']) or 'none'})"
    )
    print(f"{'path':<45} {'img/s':>8} {'GFLOP/s':>8} {'of best bound':>14}")
    for name, row in rows.items():
        print(f"{name:<45} {row['images_per_s']:>8.1f} {row['gflop_per_s']:>8.1f} {row['of_best_bound']:>14.3f}")
    print(f"best bound: {best_name}; the CLI ({cli_precision}) reaches {result['cli_of_best_bound']:.3f} of it")
    print(f"CLI start-up + final checkpoint: {result['cli_fixed_seconds']:.1f} s")
    print(
        f"CLI start-up (process start to the first step): {result['cli_startup_seconds']:.1f} s; "
        f"the first step took {result['cli_first_step_seconds']:.2f} s"
    )
    atomic_write_json(args.out, result)


if __name__ == "__main__":
    main()
