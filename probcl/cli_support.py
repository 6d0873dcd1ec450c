"""Helpers shared by the sub-commands: config overrides, presets, suite options, tables."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from probcl.config import ConfigError, parse_override_value

PACKAGE_ROOT = Path(__file__).resolve().parent
# Short flags that stand for config keys.
ALIASES = {
    "--method": "method", "--run-dir": "run_dir", "--init": "init", "--base": "method_args.base",
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


def parse_suite_options(items: list[str]) -> dict[str, dict]:
    """``["ood.datasets=digits,mnist", "knn.k=20"]`` -> {"ood": {"datasets": [...]}, "knn": {"k": 20}}."""
    options: dict[str, dict] = {}
    for item in items:
        key, sep, value = item.partition("=")
        suite, dot, name = key.partition(".")
        if not sep or not dot:
            raise ConfigError(f"suite option {item!r} must look like SUITE.KEY=VALUE")
        parsed = parse_override_value(value)
        if isinstance(parsed, str) and "," in parsed:
            parsed = [v for v in parsed.split(",") if v]
        options.setdefault(suite, {})[name] = parsed
    return options


def print_table(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """Print a table with rich."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in header:
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    Console().print(table)
