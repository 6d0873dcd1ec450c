"""Foreign encoders: any ``nn.Module`` with its preprocessing, evaluated like a probcl run.

:class:`ForeignEncoder` wraps an encoder probcl did not train (a torchvision, timm or solo-learn
checkpoint, a backbone written by ``probcl export``, any module) so that
:class:`~probcl.eval.context.ModelOnData` and every suite that needs only embeddings run on it
unchanged. It declares an embedding and nothing else: no projection head and none of the
capabilities of :mod:`probcl.methods.capabilities` (uncertainty, directional or stochastic encoder,
energy). Suites that need a probcl run (its training curves, projection head or augmentations)
declare it (``needs_run``) and are refused before any work.

Its preprocessing (input channels, image size, normalisation mean/std) is given, recorded in a
weights file's ``.json`` sidecar, or defaulted from the evaluation dataset the way probcl's own runs
are normalised: the dataset's channels, native size, and per-channel mean/std of its training images.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from probcl.config import Config, DataConfig, ModelConfig, from_dict
from probcl.core.backbone_names import backbone_choices, resolve_backbone
from probcl.core.layout import WEIGHT_SUFFIXES
from probcl.data.augment import Normalizer
from probcl.data.info import DataInfo, data_info_for
from probcl.data.loaders import load_dataset
from probcl.data.unreadable import UnreadableFiles
from probcl.errors import ConfigError
from probcl.models.backbones import build_backbone, timm_classifier
from probcl.models.inference import Inference
from probcl.models.pretrained import CLASSIFIER_PREFIX, describe_pretrained, load_state_, pretrained_state


class ForeignEncoder(Inference, nn.Module):
    """An encoder module and its preprocessing: uint8 or [0, 1] float images -> (N, d) embeddings.

    ``module`` takes normalized (N, C, H, W) inputs; its output is flattened to (N, d).
    ``source`` records where it came from (weights file, backbone) in every result's protocol.
    """

    def __init__(
        self, module: nn.Module, data_info: DataInfo, name: str = "encoder", source: dict[str, Any] | None = None
    ) -> None:
        super().__init__()
        self.module = module
        self.data_info = data_info
        self.name = name
        self.source = {"encoder": name, **(source or {}), "preprocessing": asdict(data_info)}
        self.normalizer = Normalizer(data_info.mean, data_info.std)

    def embed_batch(self, images: torch.Tensor) -> torch.Tensor:
        """Embeddings (N, d) of one uint8 or [0, 1] float batch (N, C, H, W), with autograd (``embed``: the
        public entry point, no autograd, any images, in batches)."""
        out = self.module(self.normalizer(images.to(self.normalizer.mean.device)))
        if not isinstance(out, torch.Tensor):
            raise ConfigError(
                f"encoder {self.name} returned a {type(out).__name__}, not a tensor of features; "
                f"wrap it in a module whose forward returns (N, d) features"
            )
        return out.flatten(1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.embed_batch(images)

    @torch.no_grad()
    def check_input(self) -> int:
        """The embedding width, from two blank images of the encoder's input; one ConfigError naming the
        input (channels x size) when the module does not take it."""
        info = self.data_info
        blank = torch.zeros(2, info.channels, info.image_size, info.image_size, dtype=torch.uint8)
        try:
            return self.embed(blank).shape[1]
        except RuntimeError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ConfigError(
                f"encoder {self.name} does not take {info.channels}-channel {info.image_size}x"
                f"{info.image_size} inputs ({first}); set the input channels / image size"
            ) from None


def preprocessing(
    dataset: str,
    channels: int | None = None,
    image_size: int | None = None,
    mean: list[float] | None = None,
    std: list[float] | None = None,
    data_root: str | None = None,
) -> DataInfo:
    """The inputs an encoder gets on ``dataset``: the given values, the rest from the dataset (its channels,
    native size, classes, and the per-channel mean/std of its training images, as probcl's runs use)."""
    # statistics of the readable images; the evaluation applies the unreadable-file policy and reports them
    train = load_dataset(dataset, "train", data_root, False, image_size, channels, unreadable=UnreadableFiles("skip"))
    stats = data_info_for(Config(data=DataConfig(dataset=dataset)), train)
    mean, std = list(mean or stats.mean), list(std or stats.std)
    if len(mean) != stats.channels or len(std) != stats.channels:
        raise ConfigError(
            f"normalisation mean {mean} / std {std} need one value per input channel "
            f"({stats.channels}; set the channels to match)"
        )
    if min(std) <= 0:
        raise ConfigError(f"normalisation std must be > 0, got {std}")
    return DataInfo(dataset, stats.channels, stats.image_size, stats.num_classes, mean, std)


def wrap_encoder(
    module: nn.Module,
    dataset: str,
    channels: int | None = None,
    image_size: int | None = None,
    mean: list[float] | None = None,
    std: list[float] | None = None,
    name: str | None = None,
    data_root: str | None = None,
) -> ForeignEncoder:
    """``module`` with its preprocessing on ``dataset`` (see :func:`preprocessing`)."""
    info = preprocessing(dataset, channels, image_size, mean, std, data_root)
    return ForeignEncoder(module, info, name or type(module).__name__, {"module": type(module).__name__})


def torchvision_encoder(name: str) -> tuple[nn.Module, str]:
    """torchvision's model ``name`` (random init) with its last Linear layer, the classifier, replaced by
    Identity (features = the classifier's input); returns the module and the classifier's name."""
    import torchvision

    try:
        net = torchvision.models.get_model(name, weights=None)
    except ValueError:
        raise ConfigError(f"unknown torchvision model {name!r}; see torchvision.models.list_models()") from None
    linears = [n for n, m in net.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ConfigError(f"torchvision:{name} has no Linear classifier to remove")
    net.set_submodule(linears[-1], nn.Identity())
    return net, linears[-1]


def load_encoder(
    weights: str | Path,
    dataset: str,
    model: dict[str, Any] | None = None,
    channels: int | None = None,
    image_size: int | None = None,
    mean: list[float] | None = None,
    std: list[float] | None = None,
    data_root: str | None = None,
    prefix: str | None = None,
) -> ForeignEncoder:
    """A backbone state_dict (.safetensors/.pt/.pth/.bin) loaded into the architecture ``model`` names.

    ``model``: ModelConfig keys (``backbone``: cnn, resnet18, resnet50, timm:NAME, or torchvision:NAME for
    any torchvision model, classifier removed), over those of the file's ``.json`` sidecar (``probcl export``
    writes one, with the normalisation and input the backbone was trained with). Classifier weights in the
    file (torchvision's ``fc``, timm's head) are ignored; every other tensor must fit. ``prefix``: use only the
    tensors named ``prefix...``, without it (``backbone.`` for a solo-learn or Lightning state_dict).
    """
    path = Path(weights)
    if path.is_dir():
        raise ConfigError(f"weights {path} is a folder; name the weights file in it ({', '.join(WEIGHT_SUFFIXES)})")
    if not path.is_file():
        raise ConfigError(f"weights file {path} does not exist")
    for name, value in (("channels", channels), ("image_size", image_size)):
        if value is not None and value < 1:
            raise ConfigError(f"{name} must be at least 1, got {value}")
    if path.suffix not in WEIGHT_SUFFIXES:
        raise ConfigError(
            f"weights {path}: unknown file type {path.suffix!r}; expected a state_dict ({', '.join(WEIGHT_SUFFIXES)})"
        )
    source = describe_pretrained(str(path), "evaluate")
    spec = {**(source.model or {}), **(model or {})}
    backbone = spec.get("backbone")
    if not backbone:
        raise ConfigError(
            f"weights {path}: name its architecture with --model.backbone ({backbone_choices(trainable=False)}); "
            f"it has no .json sidecar that records it"
        )
    resolved = resolve_backbone(backbone, trainable=False)
    family = resolved.family.name
    if channels is None:
        channels = source.channels or (3 if family == "torchvision" else None)
    size = image_size if image_size is not None else source.image_size
    info = preprocessing(dataset, channels, size, mean or source.mean, std or source.std, data_root)
    if family == "torchvision":
        net, classifier = torchvision_encoder(resolved.name)
        drop: tuple[str, ...] = (classifier,)
    else:
        net = build_backbone(from_dict(ModelConfig, spec, "model"), info.channels)
        drop = timm_classifier(resolved.name) if family == "timm" else (CLASSIFIER_PREFIX.removesuffix("."),)
    state = pretrained_state(source)
    if prefix:
        state = {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}
        if not state:
            raise ConfigError(f"weights {path} has no tensors named {prefix}...")
    state = {k: v for k, v in state.items() if not k.startswith(tuple(f"{p}." for p in drop))}
    load_state_(net, state, f"weights {path} (input channels {info.channels}; --channels to change)")
    return ForeignEncoder(net, info, path.stem, {"weights": str(path), "backbone": backbone})
