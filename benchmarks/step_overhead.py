"""The training loop's own cost per step, outside the model's arithmetic.

    python benchmarks/step_overhead.py                 # CPU, the default sizes
    python benchmarks/step_overhead.py --device cuda   # what a GPU run pays on the host per step

``probcl pretrain``'s loop (Lightning, the loader, logging, progress bar, the exact-resume callback, view
generation on the device, the online probe) is run in-process on a model whose arithmetic is negligible: a
1-channel CNN of width 1 on 8x8 synthetic images, batch 256. Its steady-state time per step comes from two run
lengths (their time difference over their step difference, so start-up and the final checkpoint cancel). The
same model's bare step (views + objective + backward + optimiser step, no Lightning) is timed on the same
batches right after each pair of runs; the difference is the loop's overhead per step, and the figure is the median
of the repeats' differences (this machine's speed drifts by 10-40 % over minutes, so a loop time and a bare time
measured minutes apart do not compare: today's idle runs gave loops of 8.1-14.4 ms a step). Target: <= 2 ms,
so that a ResNet-18 CIFAR step on a current GPU (~20-30 ms) runs at >= 0.9 of its bound.

Prints a table and writes JSON (``--out``), with the CPU capability.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import torch
from common import optimiser_step

from probcl.config import load_config
from probcl.core.io import atomic_write_json
from probcl.runtime.devices import resolve_device
from probcl.tasks.pretrain import pretrain

TARGET_MS = 2.0


def synthetic_npz(path: Path, images: int, size: int, channels: int = 1, test_images: int = 256, seed: int = 0) -> Path:
    """Random uint8 images (grayscale, or ``channels`` = 3 colour) with 10 random labels and a test split of
    ``test_images``, as an ``npz:`` dataset: what a speed measurement needs, nothing to download."""
    rng = np.random.default_rng(seed)
    shape = (size, size) if channels == 1 else (size, size, channels)
    np.savez(
        path,
        x=rng.integers(0, 256, (images, *shape), dtype=np.uint8),
        y=rng.integers(0, 10, images),
        x_test=rng.integers(0, 256, (test_images, *shape), dtype=np.uint8),
        y_test=rng.integers(0, 10, test_images),
    )
    return path


def tiny_overrides(data: Path, run_dir: Path, steps: int, batch: int, accelerator: str, bar: bool) -> dict:
    """A SimCLR run of ``steps`` optimiser steps whose arithmetic is negligible next to the loop's own work."""
    return {
        "method": "simclr",
        "run_dir": str(run_dir),
        "data.dataset": f"npz:{data}",
        "augment.preset": "small",
        "model.backbone": "cnn",
        "model.width": 1,
        "model.proj_hidden": 8,
        "model.proj_out": 8,
        "train.epochs": 1,
        "train.batch_size": batch,
        "train.limit_train_batches": steps,
        "train.monitor_every_n_epochs": 0,
        "train.progress_bar": bar,
        "train.precision": "32-true",
        "train.accelerator": accelerator,
        "train.devices": 1,
    }


def loop_seconds(data: Path, steps: int, batch: int, accelerator: str, bar: bool) -> float:
    """Wall seconds of one in-process ``pretrain`` of ``steps`` steps (its banner and progress bar discarded)."""
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = load_config(None, tiny_overrides(data, Path(run_dir), steps, batch, accelerator, bar))
        with open(os.devnull, "w") as sink, redirect_stderr(sink), redirect_stdout(sink):
            start = time.perf_counter()
            pretrain(cfg)
            return time.perf_counter() - start


def bare_step_seconds(data: Path, steps: int, batch: int, device: torch.device) -> float:
    """Seconds per bare step (views + objective + backward + Adam step) of the same model, no Lightning."""
    from dataclasses import asdict

    from probcl.data.info import data_info_for
    from probcl.data.loaders import load_dataset
    from probcl.data.sources import TensorImages
    from probcl.methods import METHODS

    with tempfile.TemporaryDirectory() as run_dir:
        cfg = load_config(None, tiny_overrides(data, Path(run_dir), steps, batch, device.type, False))
    train = load_dataset(cfg.data.dataset, "pretrain")
    assert isinstance(train, TensorImages)  # an npz file is held in memory
    torch.manual_seed(0)
    model = METHODS.get("simclr")(cfg.to_dict(), asdict(data_info_for(cfg, train))).to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    images = train.images[:batch].to(device)

    def one() -> None:
        optimiser_step(model, optimizer, *model.training_views(images))

    for _ in range(10):
        one()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        one()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--steps", default="40,200", help="the two run lengths (steps)")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--size", type=int, default=8, help="synthetic image size (pixels)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats (each: two loop runs, then the bare step)")
    parser.add_argument("--no-bar", action="store_true", help="progress bar off (the CLI's default is on)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--out", default="benchmarks/results/step-overhead.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    short, long = (int(s) for s in args.steps.split(","))
    load_start = round(os.getloadavg()[0], 2)
    with tempfile.TemporaryDirectory() as tmp:
        data = synthetic_npz(Path(tmp) / "tiny.npz", images=args.batch * (long + 1), size=args.size)
        loop_seconds(data, 2, args.batch, device.type, not args.no_bar)  # warm-up: imports, kernels, caches
        per_step, bare_steps = [], []
        for _ in range(args.repeats):  # loop and bare step interleaved: each repeat's pair sees the same machine
            t_short = loop_seconds(data, short, args.batch, device.type, not args.no_bar)
            t_long = loop_seconds(data, long, args.batch, device.type, not args.no_bar)
            per_step.append((t_long - t_short) / (long - short))
            bare_steps.append(bare_step_seconds(data, long, args.batch, device))
    differences = sorted(loop - bare for loop, bare in zip(per_step, bare_steps, strict=True))
    overhead_ms = max(statistics.median(differences), 0.0) * 1e3
    loop, bare = statistics.median(per_step), statistics.median(bare_steps)
    result = {
        "device": str(device),
        "threads": args.threads,
        "cpu": platform.processor() or platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "load_average_1min": {"start": load_start, "end": round(os.getloadavg()[0], 2)},
        "batch": args.batch,
        "image_size": args.size,
        "progress_bar": not args.no_bar,
        "run_lengths": [short, long],
        "loop_ms_per_step": round(loop * 1e3, 3),
        "loop_ms_per_step_all_repeats": [round(s * 1e3, 3) for s in per_step],
        "bare_step_ms": round(bare * 1e3, 3),
        "bare_step_ms_all_repeats": [round(s * 1e3, 3) for s in bare_steps],
        "overhead_ms_all_repeats": [round(d * 1e3, 3) for d in differences],
        "overhead_ms_per_step": round(overhead_ms, 3),
        "target_ms": TARGET_MS,
        "meets_target": overhead_ms <= TARGET_MS,
    }
    print(
        f"step overhead on {device} ({result['gpu'] or result['cpu']}, CPU capability {result['cpu_capability']}, "
        f"{args.threads} threads, batch {args.batch}, {args.size}x{args.size} synthetic images, "
        f"progress bar {'on' if not args.no_bar else 'off'})"
    )
    print(f"  probcl pretrain loop, per step (steady state) : {loop * 1e3:8.3f} ms (median of {args.repeats})")
    print(f"  bare step of the same model (no Lightning)     : {bare * 1e3:8.3f} ms (median)")
    print(
        f"  loop overhead per step                         : {overhead_ms:8.3f} ms (target <= {TARGET_MS} ms; "
        f"median of the repeats' differences, each {', '.join(f'{d * 1e3:.2f}' for d in differences)})"
    )
    atomic_write_json(args.out, result)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
