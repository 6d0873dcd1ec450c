"""probcl score: per-image class, OOD scores with tail probabilities, the OOD flag and why (CSV/Parquet)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, cast

from probcl.commands._options import add_inference_flags, flag_names
from probcl.core.deprecation import RenamedFlag
from probcl.errors import ConfigError

NAME = "score"
HELP = "score every image of a dataset or folder: class, OOD scores, OOD flag and why (CSV or Parquet)"
ACCEPTS_OVERRIDES = False  # no --section.key VALUE config overrides
AFTER_A_STOP = "run the same command again (the output file is written only once every image is scored)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run directory or .ckpt file")
    data = p.add_mutually_exclusive_group(required=True)
    data.add_argument("--dataset", help="dataset to score: a registered name, folder:PATH or npz:PATH (required)")
    data.add_argument("--data", dest="dataset", action=RenamedFlag, new="--dataset", help=argparse.SUPPRESS)
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
        help="also write a self-contained HTML contact sheet of the least and most typical images (default: none)",
    )
    p.add_argument(
        "--score",
        default="combined",
        help=registry_help(
            "the score that decides the OOD flag: 'combined' (default: the smallest weighted tail "
            "probability of the combination's scores under the training data), or one score's name as in "
            "`probcl evaluate --suite ood` ({names})"
        ),
    )
    p.add_argument(
        "--combination",
        default=None,
        metavar="NAMES",
        help=registry_help(
            "comma-separated scores of the combined score (default: {default} and the method's own score); "
            "the ood suite's option ood.combination"
        ),
    )
    p.add_argument("--split", default="all", choices=["all", "train", "test"], help="split of --dataset to score")
    p.add_argument(
        "--knn-k",
        type=int,
        default=None,
        help=registry_help("neighbours of the combination's kNN distance, on raw features (default: {knn_k})"),
    )
    p.add_argument("--k", dest="knn_k", type=int, action=RenamedFlag, new="--knn-k", help=argparse.SUPPRESS)
    p.add_argument(
        "--ood-threshold-tpr",
        type=float,
        default=None,
        help=registry_help(
            "OOD thresholds accept this share of in-distribution images (the run's test split) (default: {tpr})"
        ),
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
        help="seeded subset of this many training images to fit the scores (and offline probe) on "
        "(default: all of them)",
    )
    p.add_argument(
        "--max-calibration",
        type=int,
        default=None,
        help="seeded subset of this many test images to calibrate tail probabilities and thresholds on "
        "(default: all of them)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the subsets, calibration halves and offline probe")
    p.add_argument(
        "--no-cache",
        dest="cache",
        action="store_false",
        help="refit the scores instead of reusing RUN/score-cache (and do not store them)",
    )
    add_inference_flags(p)
    p.add_argument("--data-root", default=None, help="data root (default: the run's data.root, $PROBCL_DATA)")
    p.add_argument(
        "--on-unreadable",
        default="skip",
        choices=["skip", "error"],
        help="image files that cannot be read: skip them (one line gives the count, OUT.unreadable.txt the list) "
        "or stop before any work, listing them all (default: skip)",
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="ood.KEY=VALUE",
        help="the ood suite's options, spelled as for `probcl evaluate` (repeatable): "
        "ood.combination=knn10,mahalanobis and ood.knn_k=10 (one k) set --combination and --knn-k",
    )


class RegistryHelp:
    """A help text naming the registered OOD scores (``{names}``, ``{default}``) and their defaults (``{knn_k}``,
    ``{tpr}``), rendered (``str``, by the CLI's help formatter) only when help is shown: the registry imports
    torch, which the CLI's start-up does not."""

    def __init__(self, template: str) -> None:
        self.template = template

    def __str__(self) -> str:
        from probcl.eval.ood_scores import SCORES
        from probcl.eval.ood_scores.registry import COMBINATION_KNN_K
        from probcl.eval.outlier import DEFAULT_TPR

        default = SCORES.default_combination([e.name for e in SCORES.entries() if e.kind != "own uncertainty"])
        return self.template.format(
            names=", ".join(SCORES.spellings()), default=", ".join(default), knn_k=COMBINATION_KNN_K, tpr=DEFAULT_TPR
        )

    def strip(self) -> str:  # argparse asks whether the text is blank
        return str(self).strip()


def registry_help(template: str) -> str:
    """A :class:`RegistryHelp` where argparse expects the text (the CLI's help formatter renders it with ``str``)."""
    return cast(str, RegistryHelp(template))


SHARED_OOD_OPTIONS = ("combination", "knn_k")  # the ood suite's options that score takes too


def ood_options(items: list[str]) -> dict[str, Any]:
    """The ood suite's options given with --option (the syntax of `probcl evaluate`) that score shares."""
    from probcl.core.typed_config import parse_suite_options

    options = parse_suite_options(items)
    other = sorted(set(options) - {"ood"}) + sorted(
        f"ood.{k}" for k in set(options.get("ood", {})) - set(SHARED_OOD_OPTIONS)
    )
    if other:
        raise ConfigError(
            f"probcl score takes the ood suite's options {', '.join('ood.' + k for k in SHARED_OOD_OPTIONS)}; "
            f"got {', '.join(other)}"
        )
    ood = dict(options.get("ood", {}))
    if "knn_k" in ood:
        ks = ood["knn_k"] if isinstance(ood["knn_k"], list) else [ood["knn_k"]]
        if len(ks) != 1 or not isinstance(ks[0], int):
            raise ConfigError(f"probcl score uses one kNN neighbour count: ood.knn_k=10, got {ood['knn_k']!r}")
        ood["knn_k"] = ks[0]
    if isinstance(ood.get("combination"), list):
        ood["combination"] = ",".join(map(str, ood["combination"]))
    return ood


FLAGS = {"tpr": "--ood-threshold-tpr", "batch_size": "--inference-batch-size"}  # fields not set by --field-name


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from probcl.core.progress import print_table
    from probcl.tasks.score import ScoreOptions, score_dataset

    ood = ood_options(args.option)
    if "knn_k" in ood:
        args.knn_k = ood["knn_k"]
    if "combination" in ood:
        args.combination = ood["combination"]
    combination = None
    if args.combination is not None:
        combination = [s.strip() for s in args.combination.split(",") if s.strip()]
        if not combination:
            raise ConfigError(
                f"--combination {args.combination!r} names no score; name one or more, e.g. knn10,mahalanobis"
            )
    unless_unset = {  # flags left unset (None) keep ScoreOptions' defaults
        "knn_k": args.knn_k,
        "tpr": args.ood_threshold_tpr,
        "batch_size": args.batch_size,
        "device": args.device,
        "num_workers": args.num_workers,
    }
    options = ScoreOptions(
        score=args.score,
        combination=combination,
        probe=args.probe,
        split=args.split,
        max_train=args.max_train,
        max_calibration=args.max_calibration,
        seed=args.seed,
        data_root=args.data_root,
        cache=args.cache,
        on_unreadable=args.on_unreadable,
        **{name: value for name, value in unless_unset.items() if value is not None},
    ).validated(names=flag_names((f.name for f in dataclasses.fields(ScoreOptions)), FLAGS))
    summary = score_dataset(args.run, args.dataset, args.out, options, html=args.html)
    print_table(
        f"OOD decision: {summary.score} ({options.tpr:.0%} of in-distribution images accepted)",
        ("score", "flag when its tail probability under the training data is below"),
        [(name, f"{p:.3g}") for name, p in summary.tail_thresholds.items()],  # w_s exp(-T): what flags use
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
    for note in summary.notes:
        print(f"note: {note}")
    return 0
