"""The `probcl` command: sub-commands parse their arguments and dispatch to the library."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Optional

from probcl.config import ConfigError, parse_override_value

PACKAGE_ROOT = Path(__file__).resolve().parent
# Short flags that stand for config keys.
ALIASES = {
    "--method": "method", "--run-dir": "run_dir", "--init": "init",
    "--dataset": "data.dataset", "--data-root": "data.root", "--download": "data.download",
    "--train-subset": "data.train_subset",
    "--epochs": "train.epochs", "--batch-size": "train.batch_size", "--seed": "train.seed",
    "--accelerator": "train.accelerator", "--devices": "train.devices", "--strategy": "train.strategy",
    "--num-nodes": "train.num_nodes", "--precision": "train.precision", "--sync-batchnorm": "train.sync_batchnorm",
}
FLAG_ALIASES = {"--download", "--sync-batchnorm"}  # take no value


def presets_dirs() -> list[Path]:
    """Folders searched for YAML presets: ./configs, then the source checkout's configs/."""
    return [Path.cwd() / "configs", PACKAGE_ROOT.parent / "configs"]


def list_presets() -> list[str]:
    seen: dict[str, None] = {}
    for folder in presets_dirs():
        if folder.is_dir():
            for path in sorted(folder.rglob("*.yaml")):
                seen.setdefault(str(path.relative_to(folder).with_suffix("")), None)
    return list(seen)


def resolve_config_path(name: Optional[str]) -> Optional[Path]:
    """A config path as given, or a preset name like ``fashion-mnist/simclr``."""
    if name is None or Path(name).is_file():
        return None if name is None else Path(name)
    for folder in presets_dirs():
        candidate = folder / (name if name.endswith(".yaml") else f"{name}.yaml")
        if candidate.is_file():
            return candidate
    raise ConfigError(f"config {name} not found (neither a file nor a preset); presets: {', '.join(list_presets())}")


def parse_overrides(tokens: list[str]) -> dict:
    """``--a.b value``, ``--a.b=value`` and the aliases above -> {dotted key: parsed value}."""
    overrides, i = {}, 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--"):
            raise ConfigError(f"unexpected argument {token!r}; overrides look like --train.epochs 5")
        key, _, value = token.partition("=")
        if key in FLAG_ALIASES and not value:
            overrides[ALIASES[key]] = True
            i += 1
            continue
        dotted = ALIASES.get(key, key[2:].replace("-", "_"))
        if not value:
            if i + 1 >= len(tokens):
                raise ConfigError(f"{key} needs a value")
            value = tokens[i + 1]
            i += 1
        overrides[dotted] = parse_override_value(value)
        i += 1
    return overrides


# ----------------------------------------------------------------------------- sub-commands

def cmd_pretrain(args: argparse.Namespace, extra: list[str]) -> int:
    from probcl.config import load_config
    from probcl.train import pretrain

    cfg = load_config(resolve_config_path(args.config), parse_overrides(extra))
    run_dir = pretrain(cfg, resume=args.resume)
    print(f"run saved in {run_dir}")
    return 0


def cmd_evaluate(args: argparse.Namespace, extra: list[str]) -> int:
    from probcl.evaluate import evaluate_run, format_table

    suites = [s.strip() for s in args.suite.split(",") if s.strip()]
    results = evaluate_run(args.run, suites, args.device, args.batch_size, args.features, args.max_train,
                           args.data_root)
    _print_table(f"evaluation of {args.run}", ("suite", "metric", "value"), format_table(results))
    print(f"results merged into {Path(args.run) / 'eval.json'}")
    return 0


def cmd_list(args: argparse.Namespace, extra: list[str]) -> int:
    from probcl.data.datasets import dataset_names
    from probcl.eval import SUITES
    from probcl.methods import METHODS

    groups = {
        "methods": METHODS.names(),
        "datasets": dataset_names(),
        "evaluation suites": SUITES.names(),
        "presets": list_presets(),
    }
    for title, names in groups.items():
        if args.group and args.group not in title:
            continue
        print(f"{title}:")
        for name in names:
            print(f"  {name}")
    return 0


def cmd_export(args: argparse.Namespace, extra: list[str]) -> int:
    from probcl.export import export_backbone

    out = export_backbone(args.run, args.out, args.format)
    print(f"backbone weights written to {out}")
    return 0


def _print_table(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in header:
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Callable]]:
    parser = argparse.ArgumentParser(prog="probcl", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    handlers: dict[str, Callable] = {}

    p = sub.add_parser("pretrain", help="pretrain an encoder (resumes from last.ckpt when the run exists)",
                       description="Pretrain with a YAML config; any config key can be overridden as "
                                   "--section.key VALUE (e.g. --train.epochs 5 --method_args.temperature 0.2). "
                                   f"Short forms: {', '.join(ALIASES)}.")
    p.add_argument("--config", help="YAML file or preset name (see `probcl list presets`)")
    resume = p.add_mutually_exclusive_group()
    resume.add_argument("--resume", dest="resume", action="store_true", default=None,
                        help="require resuming from the run directory's last.ckpt")
    resume.add_argument("--no-resume", dest="resume", action="store_false", help="start over even if a checkpoint exists")
    handlers["pretrain"] = cmd_pretrain

    p = sub.add_parser("evaluate", help="run evaluation suites on a run; results merged into eval.json")
    p.add_argument("run", help="run directory")
    p.add_argument("--suite", default="linear,knn", help="comma-separated suite names, or 'all'")
    p.add_argument("--features", default="backbone", choices=["backbone", "projection", "pixels"],
                   help="feature layer; 'pixels' gives the raw-pixel baseline")
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:1, ...")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--max-train", type=int, default=None, help="use a seeded subset of this many training images")
    p.add_argument("--data-root", default=None)
    handlers["evaluate"] = cmd_evaluate

    p = sub.add_parser("list", help="registered methods, datasets, evaluation suites and presets")
    p.add_argument("group", nargs="?", help="only this group (methods, datasets, suites, presets)")
    handlers["list"] = cmd_list

    p = sub.add_parser("export", help="write the backbone's weights as a plain state_dict / safetensors file")
    p.add_argument("run", help="run directory or .ckpt file")
    p.add_argument("--out", default=None, help="output file (default: RUN/backbone.safetensors)")
    p.add_argument("--format", default="safetensors", choices=["safetensors", "pt"])
    handlers["export"] = cmd_export
    return parser, handlers


def main(argv: Optional[list[str]] = None) -> int:
    from probcl.data.datasets import DatasetError
    from probcl.methods import TrainingDivergedError
    from probcl.registry import UnknownNameError
    from probcl.runs import RunError

    parser, handlers = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "pretrain":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return handlers[args.command](args, extra)
    except (ConfigError, UnknownNameError) as e:
        print(f"probcl: config error: {e}", file=sys.stderr)
        return 2
    except (DatasetError, RunError, TrainingDivergedError, FileExistsError) as e:
        print(f"probcl: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
