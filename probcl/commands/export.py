"""probcl export: a run's backbone as model.safetensors (or .pt) + config.json, optionally model.onnx."""

from __future__ import annotations

import argparse

NAME = "export"
HELP = "write the backbone for use elsewhere: model.safetensors / model.pt + config.json, or also model.onnx"
ACCEPTS_OVERRIDES = False  # no --section.key VALUE config overrides
AFTER_A_STOP = "run the same command again (each exported file is written whole or not at all)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run directory or .ckpt file")
    p.add_argument(
        "--out",
        default=None,
        help="output folder (default: RUN/export/); a .safetensors / .pt / .onnx file name writes that "
        "one file and FILE.json instead",
    )
    p.add_argument(
        "--format",
        default="safetensors",
        choices=["safetensors", "onnx", "pt"],
        help="safetensors (default) or pt: the backbone's state_dict; onnx: also model.onnx, [0, 1] images "
        "(N, C, H, W; any N) -> features, normalisation inside (needs probcl[onnx])",
    )


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from probcl.tasks.export import config_file, export_backbone

    out = export_backbone(args.run, args.out, args.format)
    print(f"backbone exported: {out} (config: {config_file(out)})")
    return 0
