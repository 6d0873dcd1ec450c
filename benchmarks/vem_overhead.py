"""Training-time overhead of VEM's samplers against SimCLR, on the same backbone and batch.

Times full training steps (views, forward, loss, backward, optimiser step, post-step hooks)
of SimCLR, VEM-Langevin, VEM-SVGD and VEM-Image, in interleaved rounds so that a busy
machine slows every method alike, and reports the median seconds per step and the ratio
to SimCLR (per-epoch ratios are the same: equal batches per epoch). The paper's Table 8
(ResNet-50, CIFAR-100, GPU) has 1.10 (Langevin), 1.15 (SVGD) and 8.8 (Image).

    python benchmarks/vem_overhead.py                       # small CPU default, ~2-3 minutes
    python benchmarks/vem_overhead.py --backbone resnet18 --dataset cifar10 --batch-size 256 --device cuda
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from dataclasses import asdict

import torch
from common import optimiser_step

from probcl.config import load_config
from probcl.core.io import atomic_write_json
from probcl.data.info import DataInfo
from probcl.data.loaders import load_dataset
from probcl.methods import METHODS
from probcl.runtime.devices import resolve_device

PAPER_TABLE_8 = {"vem-langevin": 154.4 / 140.3, "vem-svgd": 160.9 / 140.3, "vem-image": 1230.4 / 140.3}
METHOD_ARGS = {
    "simclr": lambda a: {"temperature": 0.12},
    "vem-langevin": lambda a: {"bank_size": a.bank_size, "steps": a.sampler_steps},
    "vem-svgd": lambda a: {"bank_size": a.bank_size, "steps": a.sampler_steps},
    "vem-image": lambda a: {"particles": a.particles, "steps": a.sampler_steps},
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="fashion-mnist", help="images to draw batches from (default fashion-mnist)")
    p.add_argument("--backbone", default="cnn", choices=["cnn", "resnet18", "resnet50"])
    p.add_argument("--width", type=int, default=16, help="width of the small CNN")
    p.add_argument("--proj-out", type=int, default=128, help="feature (bank) dimension k")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--bank-size", type=int, default=4096, help="M of VEM-Langevin/SVGD")
    p.add_argument("--particles", type=int, default=128, help="K image particles of VEM-Image (Appendix E.5)")
    p.add_argument("--sampler-steps", type=int, default=10, help="eta, sampling steps per training step")
    p.add_argument("--steps", type=int, default=4, help="timed training steps per method and round")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median step time is reported")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per method first")
    p.add_argument("--methods", default="simclr,vem-langevin,vem-svgd,vem-image")
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", default="benchmarks/results/vem_overhead.json", help="JSON file for the results")
    return p.parse_args()


class Trainer:
    """One method with its optimiser, stepping like the Lightning loop does (minus logging)."""

    def __init__(self, method: str, args: argparse.Namespace, info: DataInfo, device: torch.device) -> None:
        cfg = load_config(
            None,
            {
                "method": method,
                "method_args": METHOD_ARGS[method](args),
                "model.backbone": args.backbone,
                "model.width": args.width,
                "model.proj_out": args.proj_out,
                "train.batch_size": args.batch_size,
                "train.seed": args.seed,
            },
        )
        self.model = METHODS.get(method)(cfg.to_dict(), asdict(info)).to(device).train()
        params = [p for _, p in self.model.trainable_named_parameters()]
        self.optimizer = torch.optim.Adam(params, lr=1e-3)

    def step(self, images: torch.Tensor) -> None:
        optimiser_step(self.model, self.optimizer, *self.model.training_views(images), (images, None, None))


def main() -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    device = resolve_device(args.device)
    data = load_dataset(args.dataset, "train")
    info = DataInfo(
        args.dataset, data.channels, data.image_size, data.num_classes, [0.5] * data.channels, [0.25] * data.channels
    )
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    trainers = {m: Trainer(m, args, info, device) for m in methods}

    def batch() -> torch.Tensor:
        idx = torch.randint(len(data), (args.batch_size,))
        return torch.stack([data[i][0] for i in idx.tolist()]).to(device)

    def timed(trainer: Trainer, steps: int) -> float:
        images = [batch() for _ in range(steps)]
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for x in images:
            trainer.step(x)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - start) / steps

    for trainer in trainers.values():
        timed(trainer, args.warmup)
    times: dict[str, list[float]] = {m: [] for m in methods}
    for r in range(args.rounds):
        for m, trainer in trainers.items():
            times[m].append(timed(trainer, args.steps))
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{m} {times[m][-1]:.3f}s" for m in methods), flush=True)

    median = {m: statistics.median(t) for m, t in times.items()}
    base = median.get("simclr")
    results = {
        m: {
            "seconds_per_step": median[m],
            "rounds": times[m],
            "ratio_to_simclr": median[m] / base if base else None,
            "paper_table8_ratio": PAPER_TABLE_8.get(m),
        }
        for m in methods
    }
    print(f"\n{'method':<14}{'s/step':>10}{'x SimCLR':>10}{'paper':>8}")
    for m, row in results.items():
        ratio = f"{row['ratio_to_simclr']:.2f}" if row["ratio_to_simclr"] else "-"
        paper = f"{row['paper_table8_ratio']:.2f}" if row["paper_table8_ratio"] else "-"
        print(f"{m:<14}{row['seconds_per_step']:>10.3f}{ratio:>10}{paper:>8}")
    report = {
        "settings": vars(args),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
        "threads": torch.get_num_threads(),
        "results": results,
    }
    atomic_write_json(args.output, report)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
