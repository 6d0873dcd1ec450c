"""Choose a preset's recipe on held-out *training* images, never on the test set.

    python benchmarks/tune_heldout.py --config fashion-mnist/simclr --seeds 0,1 --out benchmarks/results/tune-heldout \
        --recipe "base-3ep:train.epochs=3" --recipe "t0.1-3ep:train.epochs=3 method_args.temperature=0.1"

Each recipe (a name and space-separated ``key=value`` overrides of the preset) is pretrained once per seed on the
whole training split (self-supervised: no labels), without the online monitor. Its training-split backbone features
are then split by a fixed permutation (``--split-seed``, the same for every recipe and seed) into 50,000 images that
fit probcl's linear probe (L-BFGS logistic regression, its own L2 selection inside those) and 10,000 held-out images
on which its top-1 is measured; the weighted kNN (k=200, T=0.1) is scored on the same held-out images. The test
split is never loaded. Results go to ``OUT/results.json`` after each run (re-running skips finished ones; a run
killed mid-way resumes from its last checkpoint) and a table of every recipe run into OUT so far, with each recipe's
mean over seeds and its paired difference from the first recipe run, to ``OUT/results.md``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import torch
from common import timed_pretrain

from probcl.config import parse_override_value
from probcl.core.io import atomic_write_json, atomic_write_text, read_json
from probcl.eval.context import ModelOnData
from probcl.eval.knn import knn_classify, topk_accuracy
from probcl.eval.linear import linear_probe
from probcl.runtime.precision import resolve_precision


def parse_recipe(text: str) -> tuple[str, dict]:
    """``name:key=value key=value`` -> (name, overrides)."""
    name, _, sets = text.partition(":")
    overrides = {k: parse_override_value(v) for k, v in (s.split("=", 1) for s in sets.split())}
    return name, overrides


def held_out_scores(run_dir: Path, split_seed: int, held_out: int) -> dict:
    """Linear-probe and kNN top-1 (%) on ``held_out`` training images, fitted on the other training images."""
    context = ModelOnData(run_dir)
    features, labels = context.features("train")
    perm = torch.randperm(len(features), generator=torch.Generator().manual_seed(split_seed))
    test_idx, fit_idx = perm[:held_out], perm[held_out:]
    start = time.perf_counter()
    result, _ = linear_probe(
        features[fit_idx], labels[fit_idx], features[test_idx], labels[test_idx], context.num_classes
    )
    probe_seconds = time.perf_counter() - start
    scores, _ = knn_classify(features[fit_idx], labels[fit_idx], features[test_idx], context.num_classes)
    assert scores is not None
    knn = topk_accuracy(scores, labels[test_idx], (1,))
    return {
        "heldout_linear_top1": round(result["top1"], 2),
        "heldout_knn_top1": round(knn["top1"], 2),
        "probe_l2": result["protocol"]["l2"],
        "probe_seconds": round(probe_seconds, 1),
    }


def markdown(rows: list[dict]) -> str:
    """Every recipe in ``rows`` (earlier invocations' too), in order of first appearance, against the first."""
    recipes = list(dict.fromkeys(r["recipe"] for r in rows))
    by_recipe = {name: {r["seed"]: r for r in rows if r["recipe"] == name} for name in recipes}
    base = by_recipe[recipes[0]]
    lines = [
        "| recipe | seeds | train s (mean) | held-out linear % (mean) | vs first (paired mean) | held-out kNN % |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in recipes:
        mine = by_recipe[name]
        linear = [r["heldout_linear_top1"] for r in mine.values()]
        paired = [mine[s]["heldout_linear_top1"] - base[s]["heldout_linear_top1"] for s in mine if s in base]
        lines.append(
            f"| {name} | {','.join(map(str, sorted(mine)))} | "
            f"{statistics.mean(r['train_seconds'] for r in mine.values()):.0f} | {statistics.mean(linear):.2f} | "
            f"{statistics.mean(paired):+.2f} | "
            f"{statistics.mean(r['heldout_knn_top1'] for r in mine.values()):.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="fashion-mnist/simclr")
    parser.add_argument("--recipe", action="append", required=True, help="name:key=value key=value (repeatable)")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--split-seed", type=int, default=12345)
    parser.add_argument("--held-out", type=int, default=10000)
    parser.add_argument("--out", default="benchmarks/results/tune-heldout")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    recipes = [parse_recipe(r) for r in args.recipe]
    seeds = [int(s) for s in args.seeds.split(",")]
    results_path = out / "results.json"
    rows: list[dict] = read_json(results_path)["runs"] if results_path.exists() else []
    for seed in seeds:  # every recipe at seed 0 first: a partial run still compares all recipes
        for name, overrides in recipes:
            if any(r["recipe"] == name and r["seed"] == seed for r in rows):
                continue
            run_dir = out / "runs" / f"{name}-s{seed}"
            cfg, seconds = timed_pretrain(args.config, {**overrides, "train.seed": seed}, run_dir)
            row = {
                "recipe": name,
                "overrides": overrides,
                "seed": seed,
                "precision": resolve_precision(cfg.train.precision, cfg.train.accelerator).precision,
                "train_seconds": round(seconds, 1),
                **held_out_scores(run_dir, args.split_seed, args.held_out),
            }
            rows.append(row)
            print(row, flush=True)
            atomic_write_json(
                results_path,
                {
                    "config": args.config,
                    "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
                    f"capability {torch.backends.cpu.get_cpu_capability()}",
                    "torch": torch.__version__,
                    "split_seed": args.split_seed,
                    "held_out": args.held_out,
                    "runs": rows,
                },
            )
            atomic_write_text(out / "results.md", markdown(rows))
    print(markdown(rows))


if __name__ == "__main__":
    main()
