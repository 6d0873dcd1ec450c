"""probcl score: per-image predicted class, embedding norm, uncertainty, kNN distance and OOD flags (CSV/Parquet)."""
from __future__ import annotations

import argparse

NAME = "score"
HELP = "score every image of a dataset or folder: class, uncertainty, kNN distance, OOD flag (CSV or Parquet)"
SKIPPED_SHOWN = 5


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run directory or .ckpt file")
    data = p.add_mutually_exclusive_group(required=True)
    data.add_argument("--dataset", help="dataset to score: a registered name, folder:PATH or npz:PATH")
    data.add_argument("--data", dest="dataset", help=argparse.SUPPRESS)  # the spelling of probcl <= 0.1
    p.add_argument("--out", default=None, help="output .csv or .parquet (default: RUN/scores.csv); "
                                               "a .json sidecar with the protocol is written next to it")
    p.add_argument("--split", default="all", choices=["all", "train", "test"], help="split of --dataset to score")
    p.add_argument("--k", type=int, default=10, help="neighbours for the kNN distance (TaU paper: 10)")
    p.add_argument("--ood-threshold-tpr", type=float, default=0.95,
                   help="OOD flag threshold: accepts this share of the training dataset's test split")
    p.add_argument("--probe", default="online", choices=["online", "offline", "none"],
                   help="class predictions from the run's online probe, an offline logistic-regression probe "
                        "fitted on the training features, or none")
    p.add_argument("--uncertainty-score", default=None,
                   help="method-specific uncertainty score (TaU: neg_u (default), neg_u_squared)")
    p.add_argument("--max-train", type=int, default=None,
                   help="seeded subset of this many training images as kNN reference and probe data")
    p.add_argument("--seed", type=int, default=0, help="seed of the --max-train subset and the offline probe")
    p.add_argument("--batch-size", type=int, default=256, help="images per forward pass")
    p.add_argument("--num-workers", type=int, default=0, help="image-decoding processes for folder datasets")
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:1, ...")
    p.add_argument("--data-root", default=None, help="data root (default: the run's data.root, $PROBCL_DATA)")


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from probcl.core.progress import print_table
    from probcl.tasks.score import ScoreOptions, score_dataset

    options = ScoreOptions(k=args.k, tpr=args.ood_threshold_tpr, probe=args.probe,
                           uncertainty_score=args.uncertainty_score, split=args.split, batch_size=args.batch_size,
                           max_train=args.max_train, seed=args.seed, device=args.device, data_root=args.data_root,
                           num_workers=args.num_workers)
    summary = score_dataset(args.run, args.dataset, args.out, options)
    print_table(f"OOD thresholds ({args.ood_threshold_tpr:.0%} of in-distribution accepted)", ("score", "threshold"),
                [(name, f"{value:.4f}") for name, value in summary.thresholds.items()])
    print(f"{summary.rows} images scored -> {summary.out} (protocol: {summary.sidecar})")
    if summary.skipped:
        shown = ", ".join(summary.skipped[:SKIPPED_SHOWN])
        more = f" and {len(summary.skipped) - SKIPPED_SHOWN} more" if len(summary.skipped) > SKIPPED_SHOWN else ""
        print(f"skipped {len(summary.skipped)} unreadable file(s): {shown}{more}")
    return 0
