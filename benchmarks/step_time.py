"""Seconds per training step (views + objective + backward + optimiser) of presets on the same batches,
and each one's cost relative to the reference preset (SimCLR's by default).

    python benchmarks/step_time.py                      # every Fashion-MNIST method preset
    python benchmarks/step_time.py fashion-mnist/simclr fashion-mnist/ebclr --steps 5 --repeats 3

Presets are timed in turn, ``repeats`` times, so that load on a shared machine hits all of them; the
median per preset is printed and written as JSON. The first step of each repeat is a warm-up and not
counted. ``forward passes`` counts backbone forward passes per step (a method's own extra passes:
SGLD chains, momentum encoders), so a ratio can be read against its algorithm's own cost.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import asdict

import torch
from common import optimiser_step

from probcl.config import load_config
from probcl.core.io import atomic_write_json
from probcl.core.presets import resolve_config_path
from probcl.data.info import data_info_for
from probcl.data.loaders import load_dataset
from probcl.data.sources import TensorImages
from probcl.methods import METHODS
from probcl.methods.optim import build_optimizer

# BYOL and C-BYOL read their EMA schedule from a Lightning Trainer, so they are timed by `probcl pretrain` only.
FMNIST_METHODS = ("simclr", "moco", "simsiam", "vem-langevin", "vem-svgd", "ebclr", "tau-simclr", "c-simclr")


def _count_backbone_calls(model) -> list[int]:
    calls = [0]

    def hook(module, args) -> None:
        calls[0] += 1

    for module in model.modules():  # the backbone and its momentum copies
        if type(module) is type(model.backbone):
            module.register_forward_pre_hook(hook)
    return calls


def time_steps(preset: str, images: torch.Tensor, steps: int) -> tuple[float, float]:
    """Mean seconds per step after one warm-up step, and backbone forward passes per step."""
    cfg = load_config(resolve_config_path(preset))
    train = load_dataset(cfg.data.dataset, "train")
    model = METHODS.get(cfg.method)(cfg.to_dict(), asdict(data_info_for(cfg, train))).train()
    optimizer = build_optimizer(cfg.optim, model.trainable_named_parameters(), [], cfg.train.batch_size)
    calls = _count_backbone_calls(model)
    batch_size = cfg.train.batch_size
    times = []
    for i in range(steps + 1):
        x = images[(i * batch_size) % len(images) :][:batch_size]
        batch = (x, torch.full((len(x),), -1), torch.arange(len(x)))
        if i == 1:
            calls[0] = 0
        start = time.perf_counter()
        optimiser_step(model, optimizer, *model.training_views(x), batch, steps_done=i + 1)
        if i:
            times.append(time.perf_counter() - start)
    return statistics.mean(times), calls[0] / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("presets", nargs="*", default=[f"fashion-mnist/{m}" for m in FMNIST_METHODS])
    parser.add_argument("--reference", default="fashion-mnist/simclr")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/step_time.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    presets = list(dict.fromkeys([args.reference, *args.presets]))
    train = load_dataset("fashion-mnist", "train")
    assert isinstance(train, TensorImages)  # the built-in set is held in memory
    images = train.images[:4096]
    seconds: dict[str, list[float]] = {p: [] for p in presets}
    passes: dict[str, float] = {}
    for _ in range(args.repeats):
        for preset in presets:
            t, passes[preset] = time_steps(preset, images, args.steps)
            seconds[preset].append(t)
    reference = statistics.median(seconds[args.reference])
    rows = {
        p: {
            "seconds_per_step": round(statistics.median(v), 4),
            "relative": round(statistics.median(v) / reference, 2),
            "backbone_forward_passes": passes[p],
            "repeats": [round(x, 4) for x in v],
        }
        for p, v in seconds.items()
    }
    print(f"{'preset':<30} {'s/step':>8} {'x ref':>6} {'backbone passes':>16}")
    for preset, row in rows.items():
        per_step, relative, forward_passes = row["seconds_per_step"], row["relative"], row["backbone_forward_passes"]
        print(f"{preset:<30} {per_step:>8.3f} {relative:>6.2f} {forward_passes:>16.1f}")
    atomic_write_json(
        args.out,
        {
            "reference": args.reference,
            "threads": args.threads,
            "steps": args.steps,
            "date": time.strftime("%Y-%m-%d"),
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
