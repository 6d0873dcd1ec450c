"""probcl sample: images drawn from a run's energy model by proximal SGLD, saved as a PNG grid."""

from __future__ import annotations

import argparse

from probcl.commands._options import options_from_flags
from probcl.core.deprecation import RenamedFlag

NAME = "sample"
HELP = "draw images from a run's energy (EBCLR Eq. 20) with SGLD; PNG grid with each sample's energy"
ACCEPTS_OVERRIDES = False  # no --section.key VALUE config overrides
AFTER_A_STOP = "run the same command again (the image grid is written whole or not at all)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run directory or .ckpt file")
    p.add_argument("--out", default=None, help="PNG file (default: RUN/plots/samples.png)")
    p.add_argument("--num", type=int, help="number of samples (default: 64)")
    p.add_argument("--steps", type=int, help="SGLD steps (default: 200)")
    p.add_argument(
        "--start", choices=["noise", "data"], help="start chains from uniform noise or from data views (default: noise)"
    )
    p.add_argument(
        "--init", dest="start", choices=["noise", "data"], action=RenamedFlag, new="--start", help=argparse.SUPPRESS
    )
    p.add_argument("--step-size", type=float, help="alpha of Eq. 21 (default: the run's)")
    p.add_argument("--clamp", type=float, help="delta of Eq. 21 (default: the run's)")
    p.add_argument("--sigma", type=float, help="noise std (default: the run's sigma_min)")
    p.add_argument(
        "--reference", dest="reference_size", type=int, help="data views that define the energy (default: 256)"
    )
    p.add_argument("--dataset", default=None, help="dataset of the reference/start views (default: the run's)")
    p.add_argument("--data", dest="dataset", action=RenamedFlag, new="--dataset", help=argparse.SUPPRESS)
    p.add_argument("--data-root", default=None, help="data root (default: the run's data.root, $PROBCL_DATA)")
    p.add_argument("--checkpoint", default="last", choices=["last", "best"], help="which checkpoint of the run")
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:1, ...")
    p.add_argument("--ncols", type=int, default=None, help="grid columns (default: square grid)")
    p.add_argument("--seed", type=int, help="seed of the reference views and the SGLD noise (default: 0)")


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from probcl.tasks.sample import SampleOptions, sample_run

    options = options_from_flags(SampleOptions, args, {"reference_size": "--reference"})
    path, samples = sample_run(
        args.run,
        options,
        out=args.out,
        dataset=args.dataset,
        data_root=args.data_root,
        checkpoint=args.checkpoint,
        device=args.device,
        ncols=args.ncols,
    )
    print(
        f"{len(samples.images)} samples ({options.steps} SGLD steps from {options.start}); mean energy "
        f"{samples.initial_energies.mean():.3f} -> {samples.energies.mean():.3f}; grid written to {path}"
    )
    return 0
