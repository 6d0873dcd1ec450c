"""probcl pretrain: train an encoder from a YAML config plus --section.key overrides."""

from __future__ import annotations

import argparse

from probcl.config import ALIASES, parse_overrides
from probcl.core.presets import resolve_config_path

NAME = "pretrain"
HELP = "pretrain an encoder (resumes from last.ckpt when the run directory has one)"
ACCEPTS_OVERRIDES = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Pretrain with a YAML config; any config key can be overridden as --section.key VALUE "
        "(e.g. --train.epochs 5 --method_args.temperature 0.2). "
        f"Short forms: {', '.join(ALIASES)}."
    )
    p.add_argument("--config", help="YAML file or preset name (see `probcl list presets`)")
    resume = p.add_mutually_exclusive_group()
    resume.add_argument(
        "--resume",
        dest="resume",
        action="store_true",
        default=None,
        help="require resuming from the run directory's last.ckpt",
    )
    resume.add_argument(
        "--no-resume", dest="resume", action="store_false", help="start over even if a checkpoint exists"
    )


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from probcl.config import load_config
    from probcl.tasks.pretrain import pretrain

    cfg = load_config(resolve_config_path(args.config), parse_overrides(extra))
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    run_dir = pretrain(cfg, resume=args.resume)
    rank_zero_only(print)(f"run saved in {run_dir}")
    return 0
