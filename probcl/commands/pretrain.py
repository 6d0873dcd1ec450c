"""probcl pretrain: train an encoder from a YAML config plus --section.key overrides."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from probcl.config import ALIASES, Config, parse_overrides, to_plain
from probcl.core.io import read_yaml
from probcl.core.presets import resolve_config_path
from probcl.errors import ConfigError

NAME = "pretrain"
HELP = "pretrain an encoder (resumes from last.ckpt when the run directory has one)"
ACCEPTS_OVERRIDES = True
AFTER_A_STOP = "re-run the same command to resume from the last checkpoint (exactly where it left off)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Pretrain with a YAML config; any config key can be overridden as --section.key VALUE "
        "(e.g. --train.epochs 5 --method_args.temperature 0.2). "
        f"Short forms: {', '.join(ALIASES)}. `--print-config` prints every key with the value this command "
        "would use (the method's own keys under method_args included; data.image_size and data.channels as "
        "resolved from the training images). Presets ship inside the package "
        "(probcl/presets/<dataset>/<name>.yaml, listed with a line each by `probcl list presets`); --config "
        "<dataset>/<name> looks in ./configs/ first, so a ./configs/<dataset>/<name>.yaml of your own is found "
        "before a packaged one of that name."
    )
    p.add_argument(
        "--config",
        help="YAML file or preset name (see `probcl list presets`; default: none, every key at its default "
        "as --print-config shows)",
    )
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config (YAML, every key, defaults filled in) and exit without training",
    )
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


def resolved_yaml(cfg: Config) -> str:
    """The config as YAML with every key: the sections' and the method's Params, defaults filled in, and the
    settings the data decides (``data.image_size`` and ``data.channels`` when not given) as the run would resolve
    them from its training images; data that cannot be read here leaves them as given, with a comment saying why."""
    from probcl.data.loaders import load_dataset
    from probcl.data.unreadable import UnreadableFiles
    from probcl.errors import DatasetError
    from probcl.methods import METHODS

    tree = cfg.to_dict()
    tree["method_args"] = to_plain(METHODS.get(cfg.method).params(cfg))
    d, note = cfg.data, ""
    try:
        channels = None if d.channels == "auto" else d.channels
        unreadable = UnreadableFiles(d.on_unreadable)
        train = load_dataset(d.dataset, "pretrain", d.root, d.download, d.image_size, channels, unreadable=unreadable)
        tree["data"].update(image_size=train.image_size, channels=train.channels)
    except DatasetError as e:
        note = f"# data.image_size and data.channels are resolved from the training images, unreadable here: {e}\n"
    return note + yaml.safe_dump(tree, sort_keys=False)


def _with_method_switch_hint(error: ConfigError, path: Path | None, overrides: dict) -> ConfigError:
    """``error``, with how to fix it when it is about method_args that the config file wrote for another method
    than the ``--method`` given (the file's keys cannot be removed one by one on the command line)."""
    if path is None or "method" not in overrides or not any(k.startswith("method_args.") for k in error.keys):
        return error
    tree = read_yaml(path)
    written_for = tree.get("method") if isinstance(tree, dict) else None
    if not isinstance(tree, dict) or not tree.get("method_args") or written_for == overrides["method"]:
        return error
    return ConfigError(
        f"{error}. {path}'s method_args are {written_for}'s: with --method {overrides['method']}, drop them with "
        f"--method_args {{}} (then set {overrides['method']}'s own as --method_args.KEY VALUE)"
    )


def run(args: argparse.Namespace, extra: list[str]) -> int:
    path, overrides = resolve_config_path(args.config), parse_overrides(extra)
    try:
        return _run(args, path, overrides)
    except ConfigError as e:
        raise _with_method_switch_hint(e, path, overrides) from None


def _run(args: argparse.Namespace, path: Path | None, overrides: dict) -> int:
    from probcl.config import load_config

    # the config is checked before the training stack is imported: a typo fails in a fraction of a second
    cfg = load_config(path, overrides)
    from probcl.tasks.pretrain import pretrain

    if args.print_config:
        print(resolved_yaml(cfg), end="")
        return 0
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    run_dir = pretrain(cfg, resume=args.resume)
    rank_zero_only(print)(f"run saved in {run_dir}")
    return 0
