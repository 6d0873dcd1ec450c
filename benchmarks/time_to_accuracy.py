"""Linear-probe and kNN accuracy against training wall-clock, for one preset at several epoch budgets and precisions.

    python benchmarks/time_to_accuracy.py --config fashion-mnist/simclr --budgets 1,3,5 --precisions fp32,bf16 \
        --out benchmarks/results/tta-simclr [--set train.batch_size=128 --set method_args.temperature=0.1]

Each budget is a separate pretraining run with that many epochs (so each has its own learning-rate
schedule, as a user would get with ``--train.epochs N``), in each precision (``fp32``: ``train.precision
32-true``; ``bf16``: ``bf16-mixed``), without the online monitor, followed by the ``linear`` and ``knn`` suites
of ``probcl evaluate`` on the full training and test sets (features in the training precision). Results go to
``OUT/results.json`` after every run and the curves, one per precision, to ``OUT/curve.png``; re-running skips
finished runs, and a run killed mid-way resumes from its last checkpoint (its time then counts the resumed part
only). The JSON records the CPU's capability: on a CPU without AVX512-BF16/AMX, bf16 is emulated and slow.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
from common import timed_pretrain

from probcl.config import parse_override_value
from probcl.core.io import atomic_write_json, read_json
from probcl.core.names import BF16, FP32
from probcl.tasks.evaluate import evaluate_run

PRECISIONS = {"fp32": FP32, "bf16": BF16}


def run_budget(args: argparse.Namespace, epochs: int, precision: str, run_dir: Path) -> dict:
    overrides = {k: parse_override_value(v) for k, v in (s.split("=", 1) for s in args.set)}
    overrides.update({"train.epochs": epochs, "train.precision": PRECISIONS[precision]})
    _, train_seconds = timed_pretrain(args.config, overrides, run_dir)
    results = evaluate_run(run_dir, ["linear", "knn"])
    return {
        "epochs": epochs,
        "precision": precision,
        "train_seconds": round(train_seconds, 1),
        "linear_top1": round(results["linear"]["top1"], 2),
        "knn_top1": round(results["knn"]["top1"], 2),
        "linear_seconds": results["linear"]["protocol"]["seconds"],
        "knn_seconds": results["knn"]["protocol"]["seconds"],
    }


def plot(out: Path, rows: list[dict], title: str) -> None:
    import matplotlib.pyplot as plt

    from probcl.report.plots import save_figure

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for precision, colour in zip(PRECISIONS, ("tab:blue", "tab:orange")):
        mine = sorted((r for r in rows if r.get("precision", "fp32") == precision), key=lambda r: r["train_seconds"])
        if not mine:
            continue
        minutes = [r["train_seconds"] / 60 for r in mine]
        ax.plot(minutes, [r["linear_top1"] for r in mine], "o-", color=colour, label=f"linear probe, {precision}")
        ax.plot(minutes, [r["knn_top1"] for r in mine], "s--", color=colour, label=f"weighted kNN, {precision}")
        for r, m in zip(mine, minutes):
            label = f"{r['epochs']} ep"
            ax.annotate(label, (m, r["linear_top1"]), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("training wall-clock (min)")
    ax.set_ylabel("test top-1 (%)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, out / "curve.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="fashion-mnist/simclr")
    parser.add_argument("--budgets", default="1,3,5", help="comma-separated epoch counts")
    parser.add_argument("--precisions", default="fp32,bf16", help="comma-separated: fp32, bf16")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default="benchmarks/results/time-to-accuracy")
    args = parser.parse_args()
    os.environ.setdefault("PROBCL_NO_PROGRESS", "1")
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    path = out / "results.json"
    state = read_json(
        path,
        {
            "config": args.config,
            "overrides": args.set,
            "threads": torch.get_num_threads(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "budgets": {},
        },
    )
    runs = [(int(b), p) for b in args.budgets.split(",") for p in args.precisions.split(",")]
    unknown = sorted({p for _, p in runs} - set(PRECISIONS))
    if unknown:
        parser.error(f"unknown precision {', '.join(unknown)}; valid: {', '.join(PRECISIONS)}")
    for epochs, precision in runs:
        key = f"{epochs}" if precision == "fp32" else f"{epochs}@{precision}"  # fp32 keys: as before precisions
        if key in state["budgets"]:
            continue
        suffix = "" if precision == "fp32" else f"-{precision}"
        state["budgets"][key] = run_budget(args, epochs, precision, out / f"run-{epochs}ep{suffix}")
        atomic_write_json(path, state)
        row = state["budgets"][key]
        print(
            f"{epochs} epochs, {precision}: train {row['train_seconds']:.0f} s, linear {row['linear_top1']:.2f} %, "
            f"kNN {row['knn_top1']:.2f} % (probe {row['linear_seconds']:.0f} s, kNN {row['knn_seconds']:.0f} s)",
            flush=True,
        )
    plot(out, list(state["budgets"].values()), f"{args.config} {' '.join(args.set)}")


if __name__ == "__main__":
    main()
