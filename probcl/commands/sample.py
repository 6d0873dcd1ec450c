"""probcl sample: images drawn from a run's energy model by proximal SGLD, saved as a PNG grid."""

from __future__ import annotations

import argparse

from probcl.core.deprecation import RenamedFlag

NAME = "sample"
HELP = "draw images from a run's energy (EBCLR Eq. 20) with SGLD; PNG grid with each sample's energy"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run directory or .ckpt file")
    p.add_argument("--out", default=None, help="PNG file (default: RUN/plots/samples.png)")
    p.add_argument("--num", type=int, default=64, help="number of samples")
    p.add_argument("--steps", type=int, default=200, help="SGLD steps")
    p.add_argument(
        "--start", default="noise", choices=["noise", "data"], help="start chains from uniform noise or from data views"
    )
    p.add_argument(
        "--init", dest="start", choices=["noise", "data"], action=RenamedFlag, new="--start", help=argparse.SUPPRESS
    )
    p.add_argument("--step-size", type=float, default=None, help="alpha of Eq. 21 (default: the run's)")
    p.add_argument("--clamp", type=float, default=None, help="delta of Eq. 21 (default: the run's)")
    p.add_argument("--sigma", type=float, default=None, help="noise std (default: the run's sigma_min)")
    p.add_argument("--reference", type=int, default=256, help="data views that define the energy")
    p.add_argument("--dataset", default=None, help="dataset of the reference/start views (default: the run's)")
    p.add_argument("--data", dest="dataset", action=RenamedFlag, new="--dataset", help=argparse.SUPPRESS)
    p.add_argument("--data-root", default=None, help="data root (default: the run's data.root, $PROBCL_DATA)")
    p.add_argument("--checkpoint", default="last", choices=["last", "best"], help="which checkpoint of the run")
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:1, ...")
    p.add_argument("--ncols", type=int, default=None, help="grid columns (default: square grid)")
    p.add_argument("--seed", type=int, default=0, help="seed of the reference views and the SGLD noise")


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from probcl.config import AtLeast, NonNegative
    from probcl.tasks.sample import sample_run

    AtLeast(1).check("--num", args.num)
    NonNegative.check("--steps", args.steps)
    AtLeast(1).check("--reference", args.reference)
    NonNegative.check("--step-size", args.step_size)
    NonNegative.check("--clamp", args.clamp)
    NonNegative.check("--sigma", args.sigma)
    path, samples = sample_run(
        args.run,
        args.out,
        args.dataset,
        args.data_root,
        args.checkpoint,
        args.device,
        args.ncols,
        num=args.num,
        steps=args.steps,
        start=args.start,
        step_size=args.step_size,
        clamp=args.clamp,
        sigma=args.sigma,
        reference_size=args.reference,
        seed=args.seed,
    )
    print(
        f"{len(samples.images)} samples ({args.steps} SGLD steps from {args.start}); mean energy "
        f"{samples.initial_energies.mean():.3f} -> {samples.energies.mean():.3f}; grid written to {path}"
    )
    return 0
