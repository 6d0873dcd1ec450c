"""probcl evaluate: run evaluation suites on a run, merge the results into eval.json, print a table."""
from __future__ import annotations

import argparse
from pathlib import Path

from probcl.core.progress import print_table

NAME = "evaluate"
HELP = "run evaluation suites on a run; results merged into eval.json, figures drawn into RUN/plots"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run directory")
    p.add_argument("--suite", default="linear,knn", help="comma-separated suite names, or 'all' (see `probcl list suites`)")
    p.add_argument("--features", default="backbone", choices=["backbone", "projection", "pixels"],
                   help="feature layer; 'pixels' gives the raw-pixel baseline")
    p.add_argument("--option", action="append", default=[], metavar="SUITE.KEY=VALUE",
                   help="suite option, e.g. --option ood.datasets=digits,mnist (repeatable; see the README's "
                        "Evaluations table)")
    p.add_argument("--max-train", type=int, default=None,
                   help="seeded subset of this many training images for probes and kNN")
    p.add_argument("--seed", type=int, default=0, help="seed of the --max-train subset and the offline probe")
    p.add_argument("--batch-size", type=int, default=512, help="images per forward pass")
    p.add_argument("--num-workers", type=int, default=0, help="image-decoding processes for folder datasets")
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:1, ...")
    p.add_argument("--data-root", default=None, help="data root (default: the run's data.root, $PROBCL_DATA)")


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from probcl.eval.suites import parse_suite_options
    from probcl.tasks.evaluate import evaluate_run, format_table

    suites = [s.strip() for s in args.suite.split(",") if s.strip()]
    results = evaluate_run(args.run, suites, args.device, args.batch_size, args.features, args.max_train,
                           args.data_root, parse_suite_options(args.option), args.seed, args.num_workers)
    print_table(f"evaluation of {args.run}", ("suite", "metric", "value"), format_table(results))
    print(f"results merged into {Path(args.run) / 'eval.json'}")
    return 0
