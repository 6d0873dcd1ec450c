"""Training-step throughput of SimCLR: the full step (loader + batched views + forward/backward/step)
next to the pure compute bound (forward/backward/step on pre-made views), and their ratio.

    python benchmarks/throughput.py --backbone cnn --width 32 --batch-size 256 --steps 30
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import asdict

import torch
from torch.utils.data import DataLoader
from common import optimiser_step

from probcl.config import load_config
from probcl.data.datasets import load_dataset
from probcl.core.io import atomic_write_json
from probcl.methods import METHODS
from probcl.core.runs import resolve_device
from probcl.tasks.pretrain import data_info_for


def build(args):
    cfg = load_config(None, {"method": "simclr", "data.dataset": args.dataset, "model.backbone": args.backbone,
                             "model.width": args.width, "train.batch_size": args.batch_size,
                             "augment.preset": args.preset})
    train = load_dataset(args.dataset, "train")
    model = METHODS.get("simclr")(cfg.to_dict(), asdict(data_info_for(cfg, train)))
    return cfg, train, model


def timed_steps(step, batches, batch_size: int, warmup: int) -> float:
    """Images per second of ``step`` over ``batches``, after ``warmup`` untimed steps."""
    count, start = 0, None
    for i, batch in enumerate(batches):
        if i == warmup:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            start = time.perf_counter()
        step(batch)
        if i >= warmup:
            count += batch_size
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--backbone", default="cnn")
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", default="benchmarks/results/throughput.json")
    args = parser.parse_args()
    torch.manual_seed(0)
    device = resolve_device(args.device)
    cfg, train, model = build(args)
    model = model.to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def compute_step(views):
        optimiser_step(model, optimizer, *views)

    def full_step(images):
        compute_step(model.views(images.to(device, non_blocking=True)))

    n = args.steps + args.warmup
    loader = DataLoader(train, batch_size=args.batch_size, shuffle=True, drop_last=True)
    batches = (x for _, (x, _, _) in zip(range(n), loader))
    full = timed_steps(full_step, batches, args.batch_size, args.warmup)

    premade = [model.views(x.to(device)) for _, (x, _, _) in zip(range(4), loader)]
    pure = timed_steps(compute_step, (premade[i % len(premade)] for i in range(n)), args.batch_size, args.warmup)
    result = {
        "method": "simclr", "backbone": args.backbone, "width": args.width, "batch_size": args.batch_size,
        "preset": args.preset, "device": str(device), "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
        "full_step_images_per_s": round(full, 1), "pure_compute_images_per_s": round(pure, 1),
        "ratio_full_over_pure": round(full / pure, 3),
        "note": "images = pairs of views; full step = DataLoader + kornia views on device + fwd/bwd/step",
    }
    print(json.dumps(result, indent=2))
    atomic_write_json(args.out, result)


if __name__ == "__main__":
    main()
