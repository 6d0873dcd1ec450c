"""probcl's run configuration: the schema (a tree of dataclasses), YAML loading and dotted CLI overrides.

The schema's fields declare their bounds (``lr: Annotated[float, Positive] = 1e-3``), checked by
:func:`~probcl.core.typed_config.from_dict` with one message that names the key and the valid choices, so
every section and every method's ``Params`` dataclass (its ``method_args``) is validated by the same code.
Checks that relate two fields stay explicit (``__post_init__`` or ``Config.validate``).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml

from probcl.core.backbone_names import FAMILIES, resolve_backbone
from probcl.core.deprecation import warn_renamed
from probcl.core.io import atomic_write_text, read_yaml
from probcl.core.typed_config import (
    AtLeast,
    Bound,
    InRange,
    NonNegative,
    OneOf,
    Positive,
    PositiveOrInfinite,
    Probability,
    check_bounds,
    dotted,
    from_dict,
    parse_override_value,
    set_dotted,
    to_plain,
)
from probcl.errors import ConfigError

# the typed-config machinery is re-exported: a schema module is where field bounds are looked for
__all__ = [
    "ALIASES",
    "AtLeast",
    "AugmentConfig",
    "Bound",
    "check_bounds",
    "Config",
    "ConfigError",
    "DataConfig",
    "dotted",
    "FLAG_ALIASES",
    "from_dict",
    "InRange",
    "load_config",
    "LOGGERS",
    "MAX_SEED",
    "ModelConfig",
    "NonNegative",
    "OneOf",
    "OptimConfig",
    "parse_override_value",
    "parse_overrides",
    "Positive",
    "PositiveOrInfinite",
    "Probability",
    "recipe",
    "recipe_changes",
    "save_config",
    "Seed",
    "set_dotted",
    "to_plain",
    "TrainConfig",
    "VIEW_PRESETS",
    "ViewParams",
]


OnUnreadable = Literal["skip", "error"]  # what to do with image files that cannot be read
# the inference batch (images per forward pass) of every entry point that runs a trained model: embed, project,
# uncertainty, evaluate (CLI and Python), the benchmark's evaluations; a setting, not part of any result (a model in
# eval mode computes each image alone: the features agree to float32 rounding at any batch size, bit for bit for the
# Fashion-MNIST CNN at 64-1024). 128, not 512: on 2 CPU cores a batch's activations then stay in cache, 1.8x faster
# for that CNN in bf16 and 2.0x in float32, 1.2x for ResNet-18 on 32x32 images in bf16 (docs/speed.md, 2026-11-28);
# a GPU may want more (--inference-batch-size)
INFERENCE_BATCH_SIZE = 128


@dataclass
class DataConfig:
    """Which images to pretrain on and where to find them."""

    dataset: str = (
        "fashion-mnist"  # a registered name (`probcl list datasets`), folder:PATH, npz:PATH, NAME:classes=0-7
    )
    root: str | None = None  # data root; default: $PROBCL_DATA, then the dataset's system location
    download: bool = False  # let torchvision download datasets it knows
    # resize to this; default: the dataset's native size (28 for the MNIST family and digits, 32 for CIFAR); a
    # folder has none: 64, whatever size its images are (the start-up summary and --print-config show it)
    image_size: Annotated[int | None, AtLeast(1)] = None
    train_subset: Annotated[int | None, AtLeast(1)] = (
        None  # use only this many (seeded) training images, for quick runs
    )
    num_workers: Annotated[int, NonNegative] = 0  # loader processes (folder datasets decode images in them)
    # every image converted to 1 (gray) or 3 (RGB) channels; auto: the dataset's own, and for a folder RGB when
    # any of its images is colour, gray when all are gray (an alpha channel is dropped, not composited)
    channels: Literal["auto", 1, 3] = "auto"
    # image files that cannot be read: skip them (one line gives their count and RUN/unreadable.txt lists them:
    # one damaged file among thousands should not cost a run) or error (stop before training, listing them all)
    on_unreadable: OnUnreadable = "skip"


@dataclass(frozen=True)
class ViewParams:
    """Parameters of one augmentation recipe; ``*_prob`` pairs are (view 1, view 2)."""

    crop_scale: tuple[float, float] = (0.08, 1.0)
    flip: float = 0.5
    jitter: tuple[float, float, float, float] = (0.4, 0.4, 0.4, 0.1)  # brightness, contrast, saturation, hue
    jitter_prob: float = 0.8
    grayscale_prob: float = 0.2
    blur_prob: tuple[float, float] = (0.0, 0.0)
    blur_sigma: tuple[float, float] = (0.1, 2.0)
    solarize_prob: tuple[float, float] = (0.0, 0.0)
    noise_std: float = 0.0

    @property
    def colour_distortion(self) -> bool:
        """Whether the recipe changes colours (saturation or hue jitter, or grayscale views): without, a recipe
        for gray images, that leaves a colour image's colours as they are."""
        return (self.jitter_prob > 0 and any(self.jitter[2:])) or self.grayscale_prob > 0

    def describe(self) -> str:
        """The recipe in one line: crop, flip and jitter, then the parts it uses of the others."""
        b, c, s, h = self.jitter
        parts = [
            f"crop {self.crop_scale[0]:g}-{self.crop_scale[1]:g} of the area",
            f"flip {self.flip:g}",
            f"jitter {b:g}/{c:g}/{s:g}/{h:g} (brightness/contrast/saturation/hue) p {self.jitter_prob:g}",
        ]
        if self.grayscale_prob:
            parts.append(f"grayscale p {self.grayscale_prob:g}")
        if any(self.blur_prob):
            parts.append(f"blur p {self.blur_prob[0]:g}/{self.blur_prob[1]:g}")
        if any(self.solarize_prob):
            parts.append(f"solarize p {self.solarize_prob[0]:g}/{self.solarize_prob[1]:g}")
        if self.noise_std:
            parts.append(f"noise {self.noise_std:g}")
        return ", ".join(parts)


VIEW_PRESETS: dict[str, ViewParams] = {  # augment.preset: the named recipes (data/augment.py draws them)
    # 28x28 grayscale on a CPU budget: gentler crops, brightness/contrast only.
    "small": ViewParams(crop_scale=(0.4, 1.0), jitter=(0.4, 0.4, 0.0, 0.0), grayscale_prob=0.0),
    # SimCLR (Chen et al. 2020), appendix A: colour distortion strength 1.0, blur on both views.
    "simclr": ViewParams(jitter=(0.8, 0.8, 0.8, 0.2), blur_prob=(0.5, 0.5)),
    # BYOL / C-BYOL (CEB paper Table 6): asymmetric blur and solarisation.
    "byol": ViewParams(jitter=(0.4, 0.4, 0.2, 0.1), blur_prob=(1.0, 0.1), solarize_prob=(0.0, 0.2)),
    # MoCo v2: crop 0.2-1, jitter 0.4/0.4/0.4/0.1, blur p=0.5.
    "moco": ViewParams(crop_scale=(0.2, 1.0), blur_prob=(0.5, 0.5)),
    # EBCLR authors' code for MNIST / FMNIST: random resized crop + Gaussian noise 0.03, nothing else.
    "ebclr-gray": ViewParams(flip=0.0, jitter=(0, 0, 0, 0), jitter_prob=0.0, grayscale_prob=0.0, noise_std=0.03),
    # EBCLR authors' code for CIFAR: SimCLR colour + always blur (kernel 3) + noise 0.03.
    "ebclr-color": ViewParams(jitter=(0.8, 0.8, 0.8, 0.2), blur_prob=(1.0, 1.0), noise_std=0.03),
    # No augmentation: both views are the (normalized) input.
    "none": ViewParams(crop_scale=(1.0, 1.0), flip=0.0, jitter=(0, 0, 0, 0), jitter_prob=0.0, grayscale_prob=0.0),
}


@dataclass
class AugmentConfig:
    """View generation: a named preset, with optional overrides of its parameters."""

    preset: Annotated[str, OneOf(VIEW_PRESETS)] = "small"  # a recipe of VIEW_PRESETS; the keys below override it
    crop_scale: tuple[float, float] | None = None  # random resized crop: (low, high) share of the image area kept
    flip: Annotated[float | None, Probability] = None  # probability of a horizontal flip
    jitter_strength: Annotated[float | None, NonNegative] = None  # brightness/contrast(/saturation) amplitude
    jitter_prob: Annotated[float | None, Probability] = None  # probability of the colour jitter
    grayscale_prob: Annotated[float | None, Probability] = None  # probability of converting a colour view to gray
    blur_prob: tuple[float, float] | None = None  # (view 1, view 2)
    solarize_prob: tuple[float, float] | None = None  # probability of solarizing (view 1, view 2)
    noise_std: Annotated[float | None, NonNegative] = None  # std of added Gaussian pixel noise (EBCLR's views)
    normalize: Literal["dataset", "symmetric"] = "dataset"  # dataset mean/std, or [0,1] -> [-1,1]
    # whose code makes the colour, grayscale, blur, solarize and noise steps (the crop and flip are probcl's in
    # every case): kornia's, or device (probcl/data/intensity.py: the same distributions, with nothing read back
    # from the device, which a GPU waits for; kornia's colour jitter reads 5 times a view). auto: device where the
    # views are made on CUDA, kornia elsewhere: on a CPU a read costs nothing, and kornia keeps CPU runs
    # bit-identical to the published ones (the same random streams)
    backend: Literal["auto", "kornia", "device"] = "auto"


@dataclass
class ModelConfig:
    """Backbone and projection head."""

    backbone: str = "cnn"  # cnn, resnet18, resnet50, or timm:<name> (any model of timm.list_models(); random init)
    width: Annotated[int, AtLeast(1)] = 32  # base width of the small CNN
    pool: Annotated[int, AtLeast(1)] = (
        1  # small CNN: average-pool the last map to pool x pool cells (4 * width * pool^2 features)
    )
    norm: Literal["bn", "none"] = "bn"  # normalisation layers of probcl's backbones and heads: BatchNorm or none
    act: Literal["relu", "leaky_relu"] = "relu"  # activation of probcl's backbones and heads
    cifar_stem: bool = True  # 3x3 stride-1 first conv and no max-pool (ResNets)
    proj_hidden: Annotated[int, AtLeast(1)] = 512  # hidden width of the projection head
    proj_out: Annotated[int, AtLeast(1)] = 128  # output width of the projection head (the contrastive embedding)
    proj_layers: Annotated[int, AtLeast(1)] = 2  # linear layers in the projection head
    # Dropout2d rate after the first conv-BN-ReLU of every block (ResNets; every conv block of the small CNN),
    # in training and for MC-dropout passes: the TaU paper's MC-dropout baseline (p 0.5). 0 = none.
    dropout2d: Annotated[float, InRange(0.0, 1.0, high_open=True)] = 0.0  # channel dropout in the backbone (0: none)

    def __post_init__(self) -> None:
        family = resolve_backbone(self.backbone).family
        own = ", ".join(n for f in FAMILIES if f.own_layers for n in f.names)
        if not family.own_layers and self.dropout2d > 0:
            raise ConfigError(f"model.dropout2d applies to probcl's own backbones ({own}), not {self.backbone}")
        if not family.own_layers and (self.norm != "bn" or self.act != "relu"):
            raise ConfigError(
                f"model.norm / model.act apply to probcl's own backbones ({own}); "
                f"{self.backbone} keeps its own layers: leave them at bn / relu"
            )


@dataclass
class OptimConfig:
    """Optimiser and learning-rate schedule (per-step linear warm-up, then cosine or constant)."""

    # adam-lars: Adam on LARS-rescaled gradients (the TaU authors' LARSWrapper(Adam); probcl.methods.optim.LARSAdam)
    name: Literal["sgd", "adam", "adamw", "lars", "adam-lars"] = "adam"  # optimiser of the backbone and heads
    lr: Annotated[float, Positive] = 1e-3  # peak learning rate (after warm-up)
    weight_decay: Annotated[float, NonNegative] = 1e-6  # L2 weight decay
    momentum: float = 0.9  # momentum of sgd and lars
    warmup_epochs: Annotated[float, NonNegative] = 0.0  # linear warm-up from 0 to lr over this many epochs (per step)
    schedule: Literal["cosine", "constant"] = "cosine"  # after warm-up: cosine decay to lr x min_lr_ratio, or constant
    min_lr_ratio: Annotated[float, Probability] = 0.0  # final lr of the cosine schedule, as a share of lr
    scale_lr_by_batch: bool = False  # lr x batch_size / 256, as in SimCLR/BYOL
    lars_eta: Annotated[float, Positive] = 0.001  # LARS trust coefficient (SimCLR's reference LARS; BYOL, CEB, TaU)
    lars_clip: bool = False  # LARC clipping: the layer's adaptive lr never exceeds the global lr
    probe_lr: Annotated[float, Positive] = 1e-3  # online linear probe (Adam on detached features)


MAX_SEED = 2**32 - 1  # numpy's and Lightning's seed range
Seed = Annotated[int, InRange(0, MAX_SEED)]  # a seed field of any options object
LOGGERS = ("tensorboard", "wandb", "mlflow")  # valid train.loggers names


@dataclass
class TrainConfig:
    """Loop, hardware and checkpointing."""

    epochs: Annotated[int, AtLeast(1)] = 10  # passes over the training set
    batch_size: Annotated[int, AtLeast(2)] = 256  # training batch: images per optimiser step and process
    seed: Seed = 0  # seed of every random choice (data order, views, initialisation)
    accelerator: str = "auto"  # cpu | gpu | auto
    devices: Any = "auto"  # int, list of ids or "auto"
    strategy: str = "auto"  # auto | ddp | ddp_spawn | ...
    num_nodes: Annotated[int, AtLeast(1)] = 1  # machines for multi-node DDP
    # "auto": bf16-mixed on a CPU that computes bf16 natively, else 32-true (on CUDA too: bf16 measured slower there;
    # probcl/runtime/precision.py); bf16 costs no accuracy on three FMNIST presets x three seeds (docs/speed.md).
    precision: str = "auto"  # auto | 32-true | bf16-mixed | 16-mixed (Lightning's names)
    channels_last: bool = True  # NHWC memory format for conv backbones (faster convolutions on CPU and GPU)
    compile: bool = False  # torch.compile the backbone (pays off for long runs; first steps compile)
    sync_batchnorm: bool = False  # synchronise BatchNorm statistics across GPUs under DDP
    limit_train_batches: Annotated[int | float | None, Positive] = None  # batches per epoch: a count, or a fraction <1
    checkpoint_every_n_steps: Annotated[int | None, AtLeast(1)] = (
        None  # besides every epoch: for crash-resume mid-epoch
    )
    monitor_every_n_epochs: Annotated[int, NonNegative] = 1  # online kNN / linear monitor on labeled data
    monitor_train_samples: Annotated[int, AtLeast(1)] = 5000  # labeled training images the online monitor fits on
    monitor_test_samples: Annotated[int, AtLeast(1)] = 2000  # test images the online monitor scores
    loggers: list[str] = field(default_factory=list)  # besides metrics.jsonl/.csv (always): any of LOGGERS
    progress_bar: bool = True  # show the progress bar (off in tests and logs)
    # auto: on for CPU (free there; a resumed run is bit-identical), off on CUDA (cuDNN's autotuner picks the fastest
    # kernels); true/false force it (probcl/tasks/pretrain.py: resolve_deterministic; costs in docs/speed.md)
    deterministic: bool | str = "auto"


@dataclass
class Config:
    """A whole pretraining run."""

    method: str = "simclr"  # the method (`probcl list methods`)
    method_args: dict = field(default_factory=dict)  # the method's own hyper-parameters (its Params dataclass)
    run_dir: str = "runs/simclr"  # the run directory: config, checkpoints, metrics, eval.json, report
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
        if isinstance(self.train.deterministic, str) and self.train.deterministic != "auto":
            raise ConfigError(f"train.deterministic must be auto, true or false, got {self.train.deterministic!r}")
        if self.augment.crop_scale is not None:
            lo, hi = self.augment.crop_scale
            if not 0 < lo <= hi <= 1:
                raise ConfigError(
                    f"augment.crop_scale must satisfy 0 < low <= high <= 1, got {self.augment.crop_scale}"
                )
        return self


NOT_THE_RECIPE: dict[str, tuple[str, ...]] = {
    # where a run lives, and the weights it started from (read at step 0 only, which a resumed run is past)
    "": ("run_dir", "init"),
    # where the images are and how they are read
    "data": ("root", "num_workers", "download", "on_unreadable"),
    # whose code draws the views: the same distributions, other random streams (as precision changes the arithmetic)
    "augment": ("backend",),
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


def recipe_changes(saved: dict, new: dict) -> list[str]:
    """``key (saved A, now B)`` for every recipe setting (see :func:`recipe`) that differs."""
    a, b = dotted(recipe(saved)), dotted(recipe(new))
    return [f"{k} (saved {a.get(k)!r}, now {b.get(k)!r})" for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]


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
    """``--a.b value``, ``--a.b=value`` and the aliases above -> {dotted key: parsed value}.

    A config key is spelled as in YAML (``--train.batch_size``); its dashed spelling (``--train.batch-size``)
    still works for one release and says the key's spelling once."""
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
        if key not in ALIASES and "-" in key[2:]:
            warn_renamed(key, f"--{dotted}")
        if not value:
            following = tokens[i + 1] if i + 1 < len(tokens) else None
            if following is None or following.startswith("--"):
                keys = {f.name for f in dataclasses.fields(Config)}
                if dotted.split(".")[0] not in keys:  # a mistyped flag rather than a key without its value
                    raise ConfigError(
                        f"unknown option {key}: this command's own flags are in --help, and config keys are given as "
                        f"--section.key VALUE (sections: {', '.join(sorted(keys))})"
                    )
                given = f", but the next argument is the option {following}" if following else ""
                raise ConfigError(f"{key} needs a value{given}")
            value = following
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
        tree = read_yaml(path) or {}
    for key, value in (overrides or {}).items():
        set_dotted(tree, key, value)
    return from_dict(Config, tree).validate()


def save_config(cfg: Config, path: str | os.PathLike) -> None:
    """Write the resolved config as YAML, atomically."""
    atomic_write_text(path, yaml.safe_dump(cfg.to_dict(), sort_keys=False))
