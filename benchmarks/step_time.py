"""Seconds per training step (views + objective + backward + optimiser) of presets, on the same batches.

    python benchmarks/step_time.py fashion-mnist/simclr fashion-mnist/ebclr --steps 5 --repeats 3

Presets are timed in turn, ``repeats`` times, so that load on a shared machine hits all of them;
the median per preset is printed. The first step of each repeat is a warm-up and not counted.
"""
from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import asdict

import torch
from common import optimiser_step

from probcl.core.presets import resolve_config_path
from probcl.config import load_config
from probcl.data.datasets import load_dataset
from probcl.methods import METHODS
from probcl.methods.optim import build_optimizer
from probcl.tasks.pretrain import data_info_for


def time_steps(preset: str, images: torch.Tensor, steps: int, overrides: dict) -> float:
    cfg = load_config(resolve_config_path(preset), overrides)
    train = load_dataset(cfg.data.dataset, "train")
    model = METHODS.get(cfg.method)(cfg.to_dict(), asdict(data_info_for(cfg, train))).train()
    optimizer = build_optimizer(cfg.optim, model.trainable_named_parameters(), [], cfg.train.batch_size)
    batch_size = cfg.train.batch_size
    times = []
    for i in range(steps + 1):
        x = images[(i * batch_size) % len(images):][:batch_size]
        batch = (x, torch.full((len(x),), -1), torch.arange(len(x)))
        start = time.perf_counter()
        optimiser_step(model, optimizer, *model.views(x), batch)
        if i:
            times.append(time.perf_counter() - start)
    return statistics.mean(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("presets", nargs="+")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    images = load_dataset("fashion-mnist", "train").images[:4096]
    results: dict[str, list[float]] = {p: [] for p in args.presets}
    for _ in range(args.repeats):
        for preset in args.presets:
            results[preset].append(time_steps(preset, images, args.steps, {}))
    for preset, values in results.items():
        print(f"{preset}: {statistics.median(values):.3f} s/step (median of {args.repeats}; "
              f"{', '.join(f'{v:.3f}' for v in values)})")


if __name__ == "__main__":
    main()
