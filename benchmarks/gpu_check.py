"""One prepared accelerator check: how close `probcl pretrain`'s loop comes to the device's bound.

    bash benchmarks/gpu_check.sh                      # on a GPU: <= 8 minutes, writes benchmarks/results/gpu-check/
    python benchmarks/gpu_check.py --device cpu --tiny --out /tmp/gpu-check   # the same path on CPU, tiny sizes

For each preset (``fashion-mnist/simclr``, the main job's CNN; ``cifar10/simclr-gpu``, ResNet-18 at batch 512)
on synthetic images of the preset's shape (so nothing is downloaded), in one process:

- **bounds**: forward + backward + optimiser step on pre-made views, fp32 and bf16 autocast, NCHW and
  channels_last; the best is the bound;
- **pipeline**: views made on the device + the step, outside Lightning;
- **loop**: ``probcl.tasks.pretrain.pretrain`` (what ``probcl pretrain`` runs, minus interpreter start-up),
  steady state from its ``--skip``-th step to its last, timed by a callback that synchronises the device at those
  two steps only; with ``train.deterministic`` on and off, and with kornia's views (``augment.backend: kornia``)
  beside the device's own (torch.compile off: its compile time is not a rate);
- **profile**: ``torch.profiler`` over a few steps of the loop: the top operations by device time and the share of
  the wall time the device was busy (the rest is time outside the model: host work the device waited for);
- **step overhead** of the loop on a model with negligible arithmetic (``benchmarks/step_overhead.py``).

Prints one table and writes ``gpu-check.json`` (and the profile tables as text) under ``--out``.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import torch
from common import optimiser_step
from lightning.pytorch.callbacks import Callback
from step_overhead import bare_step_seconds, loop_seconds, synthetic_npz
from throughput import build, precision_context, rate, step_flops

from probcl.config import load_config
from probcl.core.io import atomic_write_json, atomic_write_text
from probcl.core.presets import resolve_config_path
from probcl.data.loaders import load_dataset
from probcl.data.sources import TensorImages
from probcl.runtime.devices import resolve_device
from probcl.tasks.pretrain import pretrain

PRESETS = {"fashion-mnist/simclr": (28, 1, 60000), "cifar10/simclr-gpu": (32, 3, 50000)}  # size, channels, images
TINY = {  # --tiny: the same code path in seconds on a CPU: overrides and image size (8 px keeps ResNet-18's CIFAR
    # stem and every layer, at 1/16 of the FLOPs: bf16 without native CPU support runs ~20x slower than float32)
    "fashion-mnist/simclr": ({"train.batch_size": 32, "model.width": 4}, 28),
    "cifar10/simclr-gpu": ({"train.batch_size": 4}, 8),
}


class SteadyStateClock(Callback):
    """Wall time from the start of step ``skip`` to the end of the last step, the device synchronised at both."""

    def __init__(self, skip: int) -> None:
        self.skip = skip
        self.start: float | None = None
        self.end: float | None = None
        self.steps = 0

    def _sync(self, device: torch.device) -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        if trainer.global_step == self.skip:
            self._sync(pl_module.device)
            self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if self.start is not None:
            self.steps += 1
            if batch_idx + 1 == trainer.num_training_batches:
                self._sync(pl_module.device)
                self.end = time.perf_counter()

    def images_per_second(self, batch_size: int) -> float:
        assert self.start is not None and self.end is not None, "the run was shorter than --skip steps"
        return self.steps * batch_size / (self.end - self.start)


class StepProfiler(Callback):
    """``torch.profiler`` from step ``first`` for ``steps`` steps of the loop; keeps the averages and wall time."""

    def __init__(self, first: int, steps: int) -> None:
        self.first, self.steps = first, steps
        self.profiler: torch.profiler.profile | None = None
        self.wall = 0.0
        self._started = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        if trainer.global_step == self.first:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if pl_module.device.type == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
                torch.cuda.synchronize(pl_module.device)
            self.profiler = torch.profiler.profile(activities=activities)
            self.profiler.start()
            self._started = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if self.profiler is not None and trainer.global_step == self.first + self.steps:
            if pl_module.device.type == "cuda":
                torch.cuda.synchronize(pl_module.device)
            self.wall = time.perf_counter() - self._started
            self.profiler.stop()

    def summary(self, device: torch.device) -> dict[str, Any]:
        """Top operations and the device's busy share of the profiled wall time."""
        assert self.profiler is not None, "the run was shorter than the profiled steps"
        events = self.profiler.key_averages()
        cuda = device.type == "cuda"
        sort = "device_time_total" if cuda else "self_cpu_time_total"
        busy_us = sum(e.self_device_time_total for e in events) if cuda else None
        return {
            "profiled_steps": self.steps,
            "wall_ms_per_step": round(self.wall / self.steps * 1e3, 3),
            "device_busy_ms_per_step": None if busy_us is None else round(busy_us / 1e3 / self.steps, 3),
            "device_busy_share": None if busy_us is None else round(busy_us / 1e6 / max(self.wall, 1e-9), 3),
            "table": events.table(sort_by=sort, row_limit=15),
        }


def quiet_pretrain(overrides: dict[str, Any], config: str, callbacks: list[Callback]) -> None:
    """``pretrain`` of ``config`` with ``overrides`` into a temporary run directory, its messages discarded."""
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = load_config(resolve_config_path(config), {**overrides, "run_dir": run_dir})
        with open(os.devnull, "w") as sink, redirect_stderr(sink):
            pretrain(cfg, callbacks=callbacks)


def check_preset(config: str, data: Path, device: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    """Bounds, pipeline, loop (deterministic on and off) and profile of one preset on synthetic data."""
    overrides: dict[str, Any] = {
        "data.dataset": f"npz:{data}",
        "train.accelerator": "gpu" if device.type == "cuda" else "cpu",
        "train.devices": 1,
        "train.compile": False,
        "train.monitor_every_n_epochs": 0,
        "train.progress_bar": True,
        "train.epochs": 1,
    }
    if args.tiny:
        overrides |= TINY[config][0]
    cfg = load_config(resolve_config_path(config), {**overrides, "run_dir": "unused"})
    batch = cfg.train.batch_size
    train = load_dataset(cfg.data.dataset, "pretrain")
    assert isinstance(train, TensorImages)  # an npz file is held in memory
    images = [train.images[i * batch : (i + 1) * batch].to(device) for i in range(2)]
    rows: dict[str, dict[str, float]] = {}
    flops = None
    torch.backends.cudnn.benchmark = True  # the bound: cuDNN's fastest kernels (no effect on CPU)
    torch.use_deterministic_algorithms(False)
    for precision in ("fp32", "bf16"):
        for layout, channels_last in (("NCHW", False), ("channels_last", True)):
            model, optimizer = build(cfg, train, device, channels_last, False)
            views = [model.training_views(x) for x in images]
            flops = flops or step_flops(model, optimizer, views[0])
            ctx = precision_context(precision, device)

            def bound_step(v, model=model, optimizer=optimizer, ctx=ctx) -> None:
                view1, view2 = v
                optimiser_step(model, optimizer, view1, view2, precision=ctx)

            rows[f"bound {layout} {precision}"] = {
                "images_per_s": rate(bound_step, views, batch, args.steps, args.warmup)
            }
    model, optimizer = build(cfg, train, device, cfg.train.channels_last, False)
    bf16 = cfg.train.precision == "bf16-mixed" or (cfg.train.precision == "auto" and device.type == "cuda")
    ctx = precision_context("bf16" if bf16 else "fp32", device)

    def pipeline_step(x: torch.Tensor) -> None:
        view1, view2 = model.training_views(x)
        optimiser_step(model, optimizer, view1, view2, precision=ctx)

    rows["pipeline (views + step, no Lightning)"] = {
        "images_per_s": rate(pipeline_step, images, batch, args.steps, args.warmup)
    }
    steps = args.skip + args.steps
    # augment.backend auto is the device's own views on CUDA; kornia's (which read back 5-6 times a view) beside it
    for deterministic, backend in (("false", "auto"), ("true", "auto"), ("false", "kornia")):
        clock = SteadyStateClock(args.skip)
        run = {**overrides, "train.limit_train_batches": steps, "train.deterministic": deterministic}
        quiet_pretrain({**run, "augment.backend": backend}, config, [clock])
        which = ", kornia views" if backend == "kornia" else ""
        name = f"probcl pretrain loop, deterministic {deterministic}{which}"
        rows[name] = {"images_per_s": clock.images_per_second(batch)}
    profiler = StepProfiler(args.skip, args.profile_steps)
    profile_run = {**overrides, "train.limit_train_batches": args.skip + args.profile_steps + 1}
    quiet_pretrain(profile_run, config, [profiler])
    assert flops is not None
    best_name, best = max(
        ((n, r["images_per_s"]) for n, r in rows.items() if n.startswith("bound")), key=lambda x: x[1]
    )
    for row in rows.values():
        row["of_best_bound"] = round(row["images_per_s"] / best, 3)
        row["gflop_per_s"] = round(row["images_per_s"] / batch * flops / 1e9, 1)
        row["ms_per_step"] = round(batch / row["images_per_s"] * 1e3, 3)
        row["images_per_s"] = float(f"{row['images_per_s']:.6g}")  # 6 significant digits: a slow CPU's 0.09 stays
    return {
        "config": config,
        "backbone": cfg.model.backbone,
        "batch_size": batch,
        "precision_of_the_loop": "bf16-mixed" if bf16 else "32-true",
        "gflop_per_step": round(flops / 1e9, 2),
        "best_bound": best_name,
        "rows": rows,
        "profile": profiler.summary(device),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--presets", default=",".join(PRESETS))
    parser.add_argument("--steps", type=int, default=60, help="timed steps of each rate")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps before each rate without the loop")
    parser.add_argument("--skip", type=int, default=15, help="loop steps before the steady-state clock starts")
    parser.add_argument("--profile-steps", type=int, default=5)
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (the CPU test of this script)")
    parser.add_argument("--out", default="benchmarks/results/gpu-check")
    args = parser.parse_args()
    if args.tiny:
        # one untimed and one timed step per rate: bf16 without native CPU support takes seconds a step
        args.steps, args.warmup, args.skip, args.profile_steps = 1, 1, 2, 1
    device = resolve_device(args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    result: dict[str, Any] = {
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "cpu": platform.processor() or platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "synthetic_data": True,
        "presets": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for config in args.presets.split(","):
            size, channels, count = PRESETS[config]
            size = TINY[config][1] if args.tiny else size
            images = 256 if args.tiny else count
            name = f"synthetic-{size}px-{channels}ch-{images}.npz"
            data = synthetic_npz(Path(tmp) / name, images, size, channels, test_images=min(images, 2000))
            preset = check_preset(config, data, device, args)
            result["presets"][config] = preset
            name = config.replace("/", "-")
            atomic_write_text(out / f"profile-{name}.txt", preset["profile"].pop("table"))
            print(
                f"\n{config}: {preset['backbone']}, batch {preset['batch_size']}, {preset['gflop_per_step']} GFLOP/step"
            )
            print(f"{'path':<46} {'img/s':>10} {'ms/step':>9} {'of bound':>9}")
            for row_name, row in preset["rows"].items():
                rate_, ms, share = row["images_per_s"], row["ms_per_step"], row["of_best_bound"]
                print(f"{row_name:<46} {rate_:>10.6g} {ms:>9.3f} {share:>9.3f}")
            p = preset["profile"]
            busy = "n/a on CPU" if p["device_busy_share"] is None else f"{p['device_busy_share']:.3f}"
            print(f"profile: {p['wall_ms_per_step']} ms/step wall, device busy share {busy} (profile-{name}.txt)")
            atomic_write_json(out / "gpu-check.json", result)  # after each preset: a cut-short run keeps what it has
        overhead_data = synthetic_npz(Path(tmp) / "tiny.npz", images=256 * 81, size=8)
        short, long = (5, 20) if args.tiny else (20, 80)
        loop_seconds(overhead_data, 2, 256, device.type, True)
        per_step = (
            loop_seconds(overhead_data, long, 256, device.type, True)
            - loop_seconds(overhead_data, short, 256, device.type, True)
        ) / (long - short)
        bare = bare_step_seconds(overhead_data, long, 256, device)
    result["step_overhead"] = {
        "loop_ms_per_step": round(per_step * 1e3, 3),
        "bare_step_ms": round(bare * 1e3, 3),
        "overhead_ms_per_step": round(max(per_step - bare, 0.0) * 1e3, 3),
    }
    result["seconds"] = round(time.perf_counter() - started, 1)
    so = result["step_overhead"]
    print(
        f"\nstep overhead (width-1 CNN, 8x8 images, batch 256): loop {so['loop_ms_per_step']} ms/step, bare step "
        f"{so['bare_step_ms']} ms, overhead {so['overhead_ms_per_step']} ms/step"
    )
    print(f"gpu check on {result['gpu'] or result['cpu']}: {result['seconds']} s; wrote {out / 'gpu-check.json'}")
    atomic_write_json(out / "gpu-check.json", result)


if __name__ == "__main__":
    main()
