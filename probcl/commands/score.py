"""probcl score: per-image class, OOD scores with tail probabilities, the OOD flag and why (CSV/Parquet)."""

from __future__ import annotations

import argparse
import math

NAME = "score"
HELP = "score every image of a dataset or folder: class, OOD scores, OOD flag and why (CSV or Parquet)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run directory or .ckpt file")
    data = p.add_mutually_exclusive_group(required=True)
    data.add_argument("--dataset", help="dataset to score: a registered name, folder:PATH or npz:PATH")
    data.add_argument("--data", dest="dataset", help=argparse.SUPPRESS)  # the spelling of probcl <= 0.1
    p.add_argument(
        "--out",
        default=None,
        help="output .csv or .parquet (default: RUN/scores.csv); "
        "a .json sidecar with the protocol is written next to it",
    )
    p.add_argument(
        "--html",
        default=None,
        metavar="PATH",
        help="also write a self-contained HTML contact sheet of the least and most typical images",
    )
    p.add_argument(
        "--score",
        default="combined",
        help="the score that decides the OOD flag: 'combined' (default: the smallest weighted tail "
        "probability of the combination's scores under the training data), or one score's name as in "
        "`probcl evaluate --suite ood` (knn10, knn10_raw, feature_norm, mahalanobis, "
        "mahalanobis_classfree, input_stats, vmf_density, image_energy, uncertainty:NAME)",
    )
    p.add_argument(
        "--combination",
        default=None,
        metavar="NAMES",
        help="comma-separated scores of the combined score (default: knn10, feature_norm, mahalanobis, "
        "input_stats and the method's own score); the ood suite's option ood.combination",
    )
    p.add_argument("--split", default="all", choices=["all", "train", "test"], help="split of --dataset to score")
    p.add_argument("--k", type=int, default=10, help="neighbours of the kNN distances (TaU paper: 10)")
    p.add_argument(
        "--ood-threshold-tpr",
        type=float,
        default=0.95,
        help="OOD thresholds accept this share of in-distribution images (the run's test split)",
    )
    p.add_argument(
        "--probe",
        default="online",
        choices=["online", "offline", "none"],
        help="class predictions from the run's online probe, an offline logistic-regression probe "
        "fitted on the training features, or none",
    )
    p.add_argument(
        "--max-train",
        type=int,
        default=None,
        help="seeded subset of this many training images to fit the scores (and offline probe) on",
    )
    p.add_argument(
        "--max-calibration",
        type=int,
        default=None,
        help="seeded subset of this many test images to calibrate tail probabilities and thresholds on",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the subsets, calibration halves and offline probe")
    p.add_argument(
        "--no-cache",
        dest="cache",
        action="store_false",
        help="refit the scores instead of reusing RUN/score-cache (and do not store them)",
    )
    p.add_argument("--batch-size", type=int, default=256, help="images per forward pass")
    p.add_argument("--num-workers", type=int, default=0, help="image-decoding processes for folder datasets")
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:1, ...")
    p.add_argument("--data-root", default=None, help="data root (default: the run's data.root, $PROBCL_DATA)")
    p.add_argument(
        "--on-unreadable",
        default="skip",
        choices=["skip", "error"],
        help="image files that cannot be read: skip them (one line gives the count, OUT.unreadable.txt the list) "
        "or stop before any work, listing them all (default: skip)",
    )


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from probcl.core.progress import print_table
    from probcl.tasks.score import ScoreOptions, score_dataset

    combination = [s.strip() for s in args.combination.split(",") if s.strip()] if args.combination else None
    options = ScoreOptions(
        score=args.score,
        combination=combination,
        k=args.k,
        tpr=args.ood_threshold_tpr,
        probe=args.probe,
        split=args.split,
        batch_size=args.batch_size,
        max_train=args.max_train,
        max_calibration=args.max_calibration,
        seed=args.seed,
        device=args.device,
        data_root=args.data_root,
        num_workers=args.num_workers,
        cache=args.cache,
        on_unreadable=args.on_unreadable,
    )
    summary = score_dataset(args.run, args.dataset, args.out, options, html=args.html)
    deciders = summary.combination if summary.score == "combined" else [summary.score]
    print_table(
        f"OOD decision: {summary.score} ({args.ood_threshold_tpr:.0%} of in-distribution images accepted)",
        ("score", "flag when its tail probability under the training data is below"),
        [(name, f"{math.exp(-summary.thresholds[summary.score]):.3g}") for name in deciders],
    )
    reused = "reused" if summary.cache.get("hit") else "fitted"
    print(
        f"{summary.rows} images scored, {summary.flagged} flagged as out-of-distribution -> {summary.out} "
        f"(protocol: {summary.sidecar}; ID reference {reused}: {summary.cache.get('path')})"
    )
    if summary.flagged_by:
        print("flagged by: " + ", ".join(f"{name} {count}" for name, count in summary.flagged_by.items()))
    if summary.html is not None:
        print(f"contact sheet -> {summary.html}")
    return 0
