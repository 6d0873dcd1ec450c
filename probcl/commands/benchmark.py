"""probcl benchmark: train and evaluate a grid of methods x seeds, then write results.json and the reports."""

from __future__ import annotations

import argparse

NAME = "benchmark"
HELP = "pretrain + evaluate a grid (methods x seeds [x batch sizes]); writes results.json, report.md, report.html"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="benchmark YAML or preset name (e.g. fashion-mnist/benchmark)")
    p.add_argument("--out", default=None, help="output folder (default: the file's `out`)")
    p.add_argument(
        "--report-only",
        action="store_true",
        help="only rebuild results.json and the reports from the cells already there",
    )
    p.add_argument(
        "--no-report",
        action="store_true",
        help="train and evaluate only; write (and publish) no report: for many workers sharing one folder, "
        "followed by one run with --report-only",
    )


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from probcl.tasks.benchmark.grid import load_benchmark
    from probcl.tasks.benchmark.results import rebuild_report
    from probcl.tasks.benchmark.run import run_benchmark

    bench, base_dir = load_benchmark(args.config)
    if args.report_only:
        rebuild_report(bench, args.out)
    else:
        run_benchmark(bench, base_dir, args.out, report=not args.no_report)
    return 0
