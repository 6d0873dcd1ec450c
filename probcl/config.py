"""Typed run configuration: dataclasses, YAML loading, dotted CLI overrides and validation.

A config is a tree of dataclasses. ``from_dict`` converts plain YAML data into it and
rejects unknown keys, wrong types and out-of-range values with one message that names the
key and the valid choices. Bounds are declared on the fields
(``lr: Annotated[float, Positive] = 1e-3``) and checked by ``from_dict``, so every section
and every method's ``Params`` dataclass (its ``method_args``) is validated by the same code.
Checks that relate two fields stay explicit (``__post_init__`` or ``Config.validate``).
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml

from probcl.errors import ConfigError


def _number(value: float | None) -> str:
    """A bound as written in messages: whole numbers in full (4294967295, not 4.29e+09), others short."""
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


@dataclass(frozen=True)
class Bound:
    """A numeric range a config field must lie in; ``None`` values (unset options) always pass."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def describe(self) -> str:
        """The range as the error message states it: ``> 0``, ``>= 1`` or ``in [0, 1)``."""
        low, high = _number(self.low), _number(self.high)
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {low}"
        if self.low is None:
            return f"{'<' if self.high_open else '<='} {high}"
        return f"in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"

    def check(self, key: str, value: float | None) -> None:
        """Raise ConfigError naming ``key`` and the range unless ``value`` lies in it."""
        if value is None:
            return
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        too_high = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        if too_low or too_high:
            raise ConfigError(f"{key} must be {self.describe()}, got {value}")


Positive = Bound(0.0, low_open=True)
NonNegative = Bound(0.0)
Probability = Bound(0.0, 1.0)


def AtLeast(low: float) -> Bound:
    """Values >= ``low`` (counts: ``Annotated[int, AtLeast(1)]``)."""
    return Bound(low)


def InRange(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> Bound:
    """Values between ``low`` and ``high`` (``InRange(0, 1, high_open=True)``: [0, 1))."""
    return Bound(low, high, low_open, high_open)


@dataclass
class DataConfig:
    """Which images to pretrain on and where to find them."""

    dataset: str = "fashion-mnist"
    root: str | None = None  # data root; default: $PROBCL_DATA, then the dataset's system location
    download: bool = False  # let torchvision download datasets it knows
    image_size: Annotated[int | None, AtLeast(1)] = None  # resize to this; default: the dataset's native size
    train_subset: Annotated[int | None, AtLeast(1)] = (
        None  # use only this many (seeded) training images, for quick runs
    )
    num_workers: Annotated[int, NonNegative] = 0  # loader processes (folder datasets decode images in them)


@dataclass
class AugmentConfig:
    """View generation: a named preset, with optional overrides of its parameters."""

    preset: Literal["small", "simclr", "byol", "moco", "ebclr-gray", "ebclr-color", "none"] = "small"
    crop_scale: tuple[float, float] | None = None
    flip: Annotated[float | None, Probability] = None
    jitter_strength: Annotated[float | None, NonNegative] = None  # brightness/contrast(/saturation) amplitude
    jitter_prob: Annotated[float | None, Probability] = None
    grayscale_prob: Annotated[float | None, Probability] = None
    blur_prob: tuple[float, float] | None = None  # (view 1, view 2)
    solarize_prob: tuple[float, float] | None = None
    noise_std: Annotated[float | None, NonNegative] = None
    normalize: Literal["dataset", "symmetric"] = "dataset"  # dataset mean/std, or [0,1] -> [-1,1]


BACKBONES = ("cnn", "resnet18", "resnet50")  # probcl's own backbones; besides them: timm:<name>
TIMM_PREFIX = "timm:"  # model.backbone timm:<name>: a timm model (optional extra `timm`)


def import_timm(backbone: str) -> types.ModuleType:
    """The ``timm`` module, or one ConfigError saying how to install it."""
    try:
        import timm
    except ImportError:
        raise ConfigError(f"model.backbone {backbone} needs timm: pip install probcl[timm]") from None
    return timm


@dataclass
class ModelConfig:
    """Backbone and projection head."""

    backbone: str = "cnn"  # one of BACKBONES, or timm:<name> (any model of timm.list_models(); random init)
    width: Annotated[int, AtLeast(1)] = 32  # base width of the small CNN
    pool: Annotated[int, AtLeast(1)] = (
        1  # small CNN: average-pool the last map to pool x pool cells (4 * width * pool^2 features)
    )
    norm: Literal["bn", "none"] = "bn"
    act: Literal["relu", "leaky_relu"] = "relu"
    cifar_stem: bool = True  # 3x3 stride-1 first conv and no max-pool (ResNets)
    proj_hidden: Annotated[int, AtLeast(1)] = 512
    proj_out: Annotated[int, AtLeast(1)] = 128
    proj_layers: Annotated[int, AtLeast(1)] = 2
    # Dropout2d rate after the first conv-BN-ReLU of every block (ResNets; every conv block of the small CNN),
    # in training and for MC-dropout passes: the TaU paper's MC-dropout baseline (p 0.5). 0 = none.
    dropout2d: Annotated[float, InRange(0.0, 1.0, high_open=True)] = 0.0

    def __post_init__(self) -> None:
        if self.dropout2d > 0 and self.backbone.startswith(TIMM_PREFIX):
            raise ConfigError(
                f"model.dropout2d applies to probcl's own backbones ({', '.join(BACKBONES)}), not {self.backbone}"
            )
        if not self.backbone.startswith(TIMM_PREFIX):
            if self.backbone not in BACKBONES:
                raise ConfigError(
                    f"model.backbone must be one of {', '.join(BACKBONES)} or timm:NAME; got {self.backbone!r}"
                )
            return
        name = self.backbone.removeprefix(TIMM_PREFIX)
        if not import_timm(self.backbone).is_model(name):
            raise ConfigError(f"model.backbone: unknown timm model {name!r}; see timm.list_models()")
        if self.norm != "bn" or self.act != "relu":
            raise ConfigError(
                f"model.norm / model.act apply to probcl's own backbones ({', '.join(BACKBONES)}); "
                f"{self.backbone} keeps its own layers: leave them at bn / relu"
            )


@dataclass
class OptimConfig:
    """Optimiser and learning-rate schedule (per-step linear warm-up, then cosine or constant)."""

    name: Literal["sgd", "adam", "adamw", "lars", "adam-lars"] = "adam"  # adam-lars: Adam on LARS-rescaled
    # gradients (the TaU authors' LARSWrapper(Adam); probcl.methods.optim.LARSAdam)
    lr: Annotated[float, Positive] = 1e-3
    weight_decay: Annotated[float, NonNegative] = 1e-6
    momentum: float = 0.9
    warmup_epochs: Annotated[float, NonNegative] = 0.0
    schedule: Literal["cosine", "constant"] = "cosine"
    min_lr_ratio: Annotated[float, Probability] = 0.0
    scale_lr_by_batch: bool = False  # lr x batch_size / 256, as in SimCLR/BYOL
    lars_eta: Annotated[float, Positive] = 0.001  # LARS trust coefficient (SimCLR's reference LARS; BYOL, CEB, TaU)
    lars_clip: bool = False  # LARC clipping: the layer's adaptive lr never exceeds the global lr
    probe_lr: Annotated[float, Positive] = 1e-3  # online linear probe (Adam on detached features)


MAX_SEED = 2**32 - 1  # numpy's and Lightning's seed range
LOGGERS = ("tensorboard", "wandb", "mlflow")  # valid train.loggers names


@dataclass
class TrainConfig:
    """Loop, hardware and checkpointing."""

    epochs: Annotated[int, AtLeast(1)] = 10
    batch_size: Annotated[int, AtLeast(2)] = 256
    seed: Annotated[int, InRange(0, MAX_SEED)] = 0
    accelerator: str = "auto"  # cpu | gpu | auto
    devices: Any = "auto"  # int, list of ids or "auto"
    strategy: str = "auto"  # auto | ddp | ddp_spawn | ...
    num_nodes: Annotated[int, AtLeast(1)] = 1
    precision: str = "32-true"  # "bf16-mixed" on GPUs with bfloat16 (Ampere and newer)
    channels_last: bool = True  # NHWC memory format for conv backbones (faster convolutions on CPU and GPU)
    compile: bool = False  # torch.compile the backbone (pays off for long runs; first steps compile)
    sync_batchnorm: bool = False
    limit_train_batches: Annotated[float | None, Positive] = None  # fraction (<=1) or count (>1) of batches per epoch
    checkpoint_every_n_steps: Annotated[int | None, AtLeast(1)] = (
        None  # besides every epoch: for crash-resume mid-epoch
    )
    monitor_every_n_epochs: Annotated[int, NonNegative] = 1  # online kNN / linear monitor on labeled data
    monitor_train_samples: Annotated[int, AtLeast(1)] = 5000
    monitor_test_samples: Annotated[int, AtLeast(1)] = 2000
    loggers: list[str] = field(default_factory=list)  # besides metrics.jsonl/.csv (always): any of LOGGERS
    progress_bar: bool = True
    deterministic: bool = True


@dataclass
class Config:
    """A whole pretraining run."""

    method: str = "simclr"
    method_args: dict = field(default_factory=dict)
    run_dir: str = "runs/simclr"
    init: str | None = None  # run dir, .ckpt or weights file the backbone starts from (any method)
    data: DataConfig = field(default_factory=DataConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict:
        return to_plain(self)

    def validate(self) -> Config:
        """Checks across fields (bounds of single fields are checked by :func:`from_dict`)."""
        unknown = [name for name in self.train.loggers if name not in LOGGERS]
        if unknown:
            raise ConfigError(
                f"unknown train.loggers {', '.join(map(repr, unknown))}; valid: {', '.join(LOGGERS)} "
                f"(metrics.jsonl/.csv are always written)"
            )
        if self.augment.crop_scale is not None:
            lo, hi = self.augment.crop_scale
            if not 0 < lo <= hi <= 1:
                raise ConfigError(
                    f"augment.crop_scale must satisfy 0 < low <= high <= 1, got {self.augment.crop_scale}"
                )
        return self


def to_plain(obj: Any) -> Any:
    """Dataclasses and tuples -> dicts and lists (YAML/JSON friendly)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj


NOT_THE_RECIPE: dict[str, tuple[str, ...]] = {
    # where a run lives, and the weights it started from (read at step 0 only, which a resumed run is past)
    "": ("run_dir", "init"),
    # where the images are and how they are read
    "data": ("root", "num_workers", "download"),
    # how fast, how it is watched and how often it is saved; not what the run learns
    "train": (
        "precision",
        "channels_last",
        "compile",
        "deterministic",
        "progress_bar",
        "loggers",
        "checkpoint_every_n_steps",
        "monitor_every_n_epochs",
        "monitor_train_samples",
        "monitor_test_samples",
    ),
}


def recipe(tree: dict) -> dict:
    """A config dict (``Config.to_dict()``) without the settings that do not change what a run learns from
    its current state on (:data:`NOT_THE_RECIPE`): a run moved to another folder, resumed with a progress bar
    off, another logger or bf16, is the same run; a benchmark cell is the same cell under another ``--out``."""
    kept = {k: v for k, v in tree.items() if k not in NOT_THE_RECIPE[""]}
    for section, keys in NOT_THE_RECIPE.items():
        if section and isinstance(kept.get(section), dict):
            kept[section] = {k: v for k, v in kept[section].items() if k not in keys}
    return kept


def dotted(tree: dict, prefix: str = "") -> dict:
    """Nested settings as {"section.key": value}."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def recipe_changes(saved: dict, new: dict) -> list[str]:
    """``key (saved A, now B)`` for every recipe setting (see :func:`recipe`) that differs."""
    a, b = dotted(recipe(saved)), dotted(recipe(new))
    return [f"{k} (saved {a.get(k)!r}, now {b.get(k)!r})" for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]


def _convert(value: Any, tp: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Annotated:
        converted = _convert(value, args[0], key)
        for bound in (a for a in args[1:] if isinstance(a, Bound)):
            bound.check(key, converted)
        return converted
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(value, arg, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{key}: invalid value {value!r}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key} must be one of {', '.join(map(str, args))}; got {value!r}")
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_dict(tp, value, key)
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ConfigError(f"{key} must be a list of {len(args)} values, got {value!r}")
        return tuple(_convert(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if origin is list:
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        elif isinstance(value, (int, float)):  # one value given for a list (`--option ood.knn_k=10`)
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key} must be a list, got {value!r}")
        return [_convert(v, args[0], f"{key}[{i}]") for i, v in enumerate(value)] if args else list(value)
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key} must be a mapping, got {value!r}")
        if len(args) == 2:  # typed values (dict[str, SomeDataclass]) are converted one by one
            return {k: _convert(v, args[1], f"{key}.{k}") for k, v in value.items()}
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ConfigError(f"{key} must be true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ConfigError(f"{key} must be an integer, got {value!r}")
        try:
            as_float = float(value)
        except ValueError:
            raise ConfigError(f"{key} must be an integer, got {value!r}") from None
        if not as_float.is_integer():
            raise ConfigError(f"{key} must be an integer, got {value!r}")
        return int(as_float)
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{key} must be a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key} must be a number, got {value!r}") from None
    if tp is str:
        if not isinstance(value, (str, int, float)):
            raise ConfigError(f"{key} must be a string, got {value!r}")
        return str(value)
    return value


def from_dict(cls: type, data: dict | None, prefix: str = "") -> Any:
    """Build dataclass ``cls`` from ``data``, rejecting unknown keys and ill-typed values."""
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'} must be a mapping, got {data!r}")
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(
            f"unknown config key(s) {', '.join(where + k for k in unknown)}; "
            f"valid keys{' of ' + prefix if prefix else ''}: {', '.join(fields)}"
        )
    missing = [
        name
        for name, f in fields.items()
        if name not in data and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(f"missing config key(s) {', '.join(where + k for k in missing)}; give a value for each")
    kwargs = {k: _convert(v, hints[k], f"{prefix}.{k}" if prefix else k) for k, v in data.items()}
    return cls(**kwargs)


def set_dotted(tree: dict, dotted: str, value: Any) -> None:
    """Set ``tree['a']['b'] = value`` for ``dotted='a.b'``, creating levels as needed."""
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"cannot set {dotted}: {part} is not a section")
    node[parts[-1]] = value


def parse_override_value(text: str) -> Any:
    """CLI override text -> YAML scalar/list (``0.2`` -> float, ``[0.5,1]`` -> list, ``true`` -> bool)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


# Short CLI flags that stand for config keys (`probcl pretrain --epochs 5` = `--train.epochs 5`).
ALIASES = {
    "--method": "method",
    "--run-dir": "run_dir",
    "--init": "init",
    "--base": "method_args.base",
    "--dataset": "data.dataset",
    "--data-root": "data.root",
    "--download": "data.download",
    "--train-subset": "data.train_subset",
    "--num-workers": "data.num_workers",
    "--epochs": "train.epochs",
    "--batch-size": "train.batch_size",
    "--seed": "train.seed",
    "--accelerator": "train.accelerator",
    "--devices": "train.devices",
    "--strategy": "train.strategy",
    "--num-nodes": "train.num_nodes",
    "--precision": "train.precision",
    "--sync-batchnorm": "train.sync_batchnorm",
}
FLAG_ALIASES = {"--download", "--sync-batchnorm"}  # take no value


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


def load_config(path: str | os.PathLike | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Load a YAML config (optional), apply dotted overrides, validate and return it."""
    tree: dict = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist; see `probcl list presets` for the presets")
        try:
            tree = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {path} is not valid YAML: {e}") from None
    for key, value in (overrides or {}).items():
        set_dotted(tree, key, value)
    return from_dict(Config, tree).validate()


def save_config(cfg: Config, path: str | os.PathLike) -> None:
    """Write the resolved config as YAML, atomically."""
    from probcl.core.io import atomic_write_text

    atomic_write_text(path, yaml.safe_dump(cfg.to_dict(), sort_keys=False))
