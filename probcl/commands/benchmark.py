"""probcl benchmark: train and evaluate a grid of methods x seeds, then write results.json and the reports."""

from __future__ import annotations

import argparse

NAME = "benchmark"
HELP = "pretrain + evaluate a grid (methods x seeds [x batch sizes]); writes results.json, report.md, report.html"
ACCEPTS_OVERRIDES = False  # no --section.key VALUE config overrides
AFTER_A_STOP = (
    "re-run the same command: finished cells are kept, and a cell in progress resumes from its last checkpoint"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="benchmark YAML or preset name (e.g. fashion-mnist/benchmark)")
    p.add_argument("--out", default=None, help="output folder (default: the file's `out`)")
    p.add_argument(
        "--report-only",
        action="store_true",
        help="only rebuild results.json and the reports from the cells already there",
    )
    p.add_argument(
        "--seeds",
        default=None,
        help="train only the cells of these seeds (comma-separated, e.g. 0,1,2): machines split a grid by seed, "
        "so the cells of one seed, which paired comparisons read together, run on one kind of hardware "
        "(default: every seed)",
    )
    p.add_argument(
        "--no-report",
        action="store_true",
        help="train and evaluate only; write (and publish) no report: for many workers sharing one folder, "
        "followed by one run with --report-only",
    )


def parse_seeds(text: str | None) -> set[int] | None:
    """``--seeds 0,1,2`` as a set (None: every seed)."""
    if text is None:
        return None
    from probcl.errors import ConfigError

    try:
        seeds = {int(part) for part in text.split(",") if part.strip()}
    except ValueError:
        raise ConfigError(f"--seeds {text!r}: give whole numbers separated by commas, e.g. --seeds 0,1,2") from None
    if not seeds:
        raise ConfigError("--seeds is empty: give whole numbers separated by commas, e.g. --seeds 0,1,2")
    return seeds


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from probcl.tasks.benchmark.grid import load_benchmark
    from probcl.tasks.benchmark.results import rebuild_report
    from probcl.tasks.benchmark.run import run_benchmark

    bench, base_dir = load_benchmark(args.config)
    if args.report_only:
        rebuild_report(bench, args.out)
    else:
        run_benchmark(bench, base_dir, args.out, report=not args.no_report, seeds=parse_seeds(args.seeds))
    return 0
