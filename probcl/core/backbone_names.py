"""The backbone registry's names (torch-free): probcl's own backbones and the prefix families of other libraries.

One table answers "is this a backbone name, which family builds it, and what can it be used for"; config
validation (:class:`probcl.config.ModelConfig`), the builders (:func:`probcl.models.backbones.build_backbone`,
keyed by family) and ``evaluate --weights`` (:func:`probcl.models.encoder.load_encoder`) all resolve names
here, timm-style: a plain name (``cnn``, ``resnet18``) or ``prefix:NAME`` (``timm:resnet10t``,
``torchvision:vit_b_16``). A prefix family checks NAME with its library, imported only when asked for.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass

from probcl.errors import ConfigError


def import_timm(backbone: str) -> types.ModuleType:
    """The ``timm`` module, or one ConfigError saying how to install it."""
    try:
        import timm
    except ImportError:
        raise ConfigError(f"model.backbone {backbone} needs timm: pip install probcl[timm]") from None
    return timm


def _check_timm(name: str) -> None:
    if not import_timm(f"timm:{name}").is_model(name):
        raise ConfigError(f"model.backbone: unknown timm model {name!r}; see timm.list_models()")


def _check_torchvision(name: str) -> None:
    import torchvision

    if name not in torchvision.models.list_models():
        raise ConfigError(f"unknown torchvision model {name!r}; see torchvision.models.list_models()")


@dataclass(frozen=True)
class BackboneFamily:
    """A family of backbones built the same way."""

    name: str  # the builder's key in probcl.models.backbones.BUILDERS
    names: tuple[str, ...] = ()  # plain names of probcl's own backbones
    prefix: str | None = None  # "timm:": the family takes any NAME its library checks
    check: Callable[[str], None] | None = None  # raises ConfigError for a NAME the library does not have
    own_layers: bool = False  # model.norm / model.act / model.cifar_stem apply
    trainable: bool = True  # pretrain may use it (torchvision models only evaluate: fixed 3-channel stems)

    def spelling(self) -> str:
        return f"{self.prefix}NAME" if self.prefix else ", ".join(self.names)


FAMILIES = (
    BackboneFamily("cnn", names=("cnn",), own_layers=True),
    BackboneFamily("resnet", names=("resnet18", "resnet50"), own_layers=True),
    BackboneFamily("timm", prefix="timm:", check=_check_timm),
    BackboneFamily("torchvision", prefix="torchvision:", check=_check_torchvision, trainable=False),
)


@dataclass(frozen=True)
class BackboneName:
    """A resolved backbone name: its family and the NAME within it (the whole name for probcl's own)."""

    family: BackboneFamily
    name: str


def backbone_choices(trainable: bool = True) -> str:
    """The valid spellings, e.g. ``cnn, resnet18, resnet50 or timm:NAME``."""
    spellings = [f.spelling() for f in FAMILIES if f.trainable or not trainable]
    return ", ".join(spellings[:-1]) + f" or {spellings[-1]}"


def resolve_backbone(backbone: str, trainable: bool = True) -> BackboneName:
    """The family and NAME of ``backbone``; one ConfigError naming the valid spellings (or the library's
    verdict on NAME) otherwise. ``trainable``: only the families pretrain can use."""
    for family in FAMILIES:
        if family.prefix and backbone.startswith(family.prefix) and (family.trainable or not trainable):
            name = backbone.removeprefix(family.prefix)
            if family.check is not None:
                family.check(name)
            return BackboneName(family, name)
        if backbone in family.names and (family.trainable or not trainable):
            return BackboneName(family, backbone)
    raise ConfigError(f"model.backbone must be one of {backbone_choices(trainable)}; got {backbone!r}")
