"""Training throughput of a preset: the compute bounds next to what the pipeline and the CLI achieve.

    python benchmarks/throughput.py --config fashion-mnist/simclr --steps 30 --repeats 2

Rows (images = pairs of views per second, best of ``repeats``):

- bound eager / channels_last / compiled: forward + backward + optimiser step on pre-made views
  (NCHW; NHWC; NHWC with ``torch.compile`` of the backbone), the hardware's bound for this model;
- in-process pipeline: DataLoader + kornia views + step, with the preset's own memory format;
- ``probcl pretrain`` (subprocess, monitor off): the steady-state rate from two runs of different
  lengths (their time difference over their step difference), and the fixed cost (start-up to the
  first step plus the final checkpoint) as the longer run's time minus its steps at that rate.

GFLOP/s use the FLOPs of one step counted by ``torch.utils.flop_counter.FlopCounterMode``.
A table is printed and the figures are written as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
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
from probcl.core.devices import resolve_device
from probcl.core.io import atomic_write_json
from probcl.core.presets import resolve_config_path
from probcl.data.info import data_info_for
from probcl.data.loaders import load_dataset
from probcl.methods import METHODS

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


def step_flops(model, optimizer, views) -> int:
    with FlopCounterMode(display=False) as counter:
        optimiser_step(model, optimizer, *views)
    return counter.get_total_flops()


def cli_seconds(config: str, batches: int, threads: int) -> float:
    """Wall time of `probcl pretrain` (monitor off, one epoch of ``batches`` steps) in a fresh process."""
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
        ]
        env = {**os.environ, "PROBCL_NO_PROGRESS": "1", "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
        start = time.perf_counter()
        subprocess.run(cmd, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="fashion-mnist/simclr")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cli-steps", default="10,60", help="the two run lengths (steps) of the CLI measurement")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile bound")
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

    variants = {"bound eager (NCHW)": (False, False), "bound channels_last": (True, False)}
    if not args.no_compile:
        variants["bound compiled (channels_last)"] = (True, True)
    rows: dict[str, dict] = {}
    flops = None
    for name, (channels_last, compiled) in variants.items():
        model, optimizer = build(cfg, train, device, channels_last, compiled)
        views = [model.training_views(x) for x in images]
        if flops is None:
            flops = step_flops(model, optimizer, views[0])

        def train_step(v, model=model, optimizer=optimizer) -> None:
            optimiser_step(model, optimizer, *v)

        best = max(rate(train_step, views, batch_size, args.steps, args.warmup) for _ in range(args.repeats))
        rows[name] = {"images_per_s": best}

    model, optimizer = build(cfg, train, device, cfg.train.channels_last, cfg.train.compile)

    def pipeline_step(x: torch.Tensor) -> None:
        optimiser_step(model, optimizer, *model.training_views(x))

    rows["in-process pipeline (views + step)"] = {
        "images_per_s": max(
            rate(pipeline_step, images, batch_size, args.steps, args.warmup) for _ in range(args.repeats)
        )
    }

    short, long = (int(s) for s in args.cli_steps.split(","))
    cli_rates, overheads = [], []
    for _ in range(args.repeats):
        t_short, t_long = cli_seconds(args.config, short, args.threads), cli_seconds(args.config, long, args.threads)
        cli_rate = (long - short) * batch_size / max(t_long - t_short, 1e-9)
        cli_rates.append(cli_rate)
        overheads.append(t_long - long * batch_size / cli_rate)
    best_i = max(range(len(cli_rates)), key=cli_rates.__getitem__)
    rows["probcl pretrain (CLI, steady state)"] = {"images_per_s": cli_rates[best_i]}

    best_bound = max(r["images_per_s"] for n, r in rows.items() if n.startswith("bound"))
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
        "date": time.strftime("%Y-%m-%d"),
        "load_average_1min": {"start": load_start, "end": round(os.getloadavg()[0], 2)},
        "gflop_per_step": round(flops / 1e9, 2),
        "rows": rows,
        "cli_fixed_seconds": round(overheads[best_i], 1),
        "cli_fixed_seconds_note": "start-up to the first step + final checkpoint, from two run lengths",
        "note": "images = pairs of views; best of repeats",
    }
    print(
        f"{args.config}: {cfg.model.backbone} width {cfg.model.width}, batch {batch_size}, {device}, "
        f"{args.threads} threads, {result['gflop_per_step']} GFLOP/step"
    )
    print(f"{'path':<40} {'img/s':>8} {'GFLOP/s':>8} {'of best bound':>14}")
    for name, row in rows.items():
        print(f"{name:<40} {row['images_per_s']:>8.1f} {row['gflop_per_s']:>8.1f} {row['of_best_bound']:>14.3f}")
    print(f"CLI start-up + final checkpoint: {result['cli_fixed_seconds']:.1f} s")
    atomic_write_json(args.out, result)


if __name__ == "__main__":
    main()
