"""probcl export: a run's backbone weights as a plain state_dict (safetensors or .pt)."""
from __future__ import annotations

import argparse

NAME = "export"
HELP = "write the backbone's weights as a plain state_dict / safetensors file"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run directory or .ckpt file")
    p.add_argument("--out", default=None, help="output file (default: RUN/backbone.safetensors)")
    p.add_argument("--format", default="safetensors", choices=["safetensors", "pt"])


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from probcl.tasks.export import export_backbone

    out = export_backbone(args.run, args.out, args.format)
    print(f"backbone weights written to {out}")
    return 0
