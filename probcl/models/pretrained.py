"""Pretrained backbones for post-hoc methods: from a probcl run, or from a plain weights file.

``init`` is either a probcl run directory / ``.ckpt`` file (any method), or a state_dict of a
backbone stored as ``.safetensors`` / ``.pt`` / ``.pth`` / ``.bin`` (what `probcl export`
writes, or torchvision ResNet weights), or a `probcl export` folder (or its ``config.json``).
Runs and exported files (the folder's ``config.json``, or a ``WEIGHTS.json`` sidecar) also say
which architecture and input normalization the backbone was trained with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from probcl.config import ConfigError, ModelConfig, from_dict
from probcl.core.io import torch_load_problem
from probcl.core.layout import (
    EXPORT_CONFIG,
    EXPORT_FORMAT,
    RUN_SUFFIXES,
    WEIGHT_SUFFIXES,
    exported_weights,
)
from probcl.errors import RunError
from probcl.models.backbones import build_backbone
from probcl.models.checkpoint import read_checkpoint

BACKBONE_FIELDS = ("backbone", "width", "pool", "norm", "act", "cifar_stem")  # ModelConfig keys that shape the backbone
CLASSIFIER_PREFIX = "fc."  # torchvision ResNet classifier: probcl backbones have none


@dataclass
class PretrainedSource:
    """What is known about a pretrained backbone before its weights are read."""

    path: Path
    model: dict | None = None  # its ModelConfig as a dict, when recorded
    mean: list[float] | None = None  # the input normalization it was trained with, when recorded
    std: list[float] | None = None
    channels: int | None = None  # input channels and image size it was trained on, when recorded
    image_size: int | None = None
    run_state: dict[str, torch.Tensor] | None = None  # a run's backbone weights, read with its config
    recorded: dict[str, Any] = field(default_factory=dict)  # everything a weights file's config records


def describe_pretrained(init: str | None, method: str) -> PretrainedSource:
    """Identify ``init`` (run or weights file) and read its recorded architecture; clear errors otherwise."""
    if not init:
        raise ConfigError(
            f"method {method!r} trains on top of a pretrained encoder: pass --init RUN_DIR "
            f"(a probcl run or .ckpt) or --init WEIGHTS ({', '.join(WEIGHT_SUFFIXES)})"
        )
    path = Path(init)
    if not path.exists():
        raise ConfigError(
            f"init {path} does not exist; pass a probcl run directory, a .ckpt file, or a backbone "
            f"weights file ({', '.join(WEIGHT_SUFFIXES)})"
        )
    weights = exported_weights(path)
    if weights is None and (path.is_dir() or path.suffix in RUN_SUFFIXES):
        return _run_backbone(path)
    if weights is None:
        raise ConfigError(
            f"init {path}: unknown file type {path.suffix!r}; expected a run directory, .ckpt, "
            f"a `probcl export` folder, or weights ({', '.join(WEIGHT_SUFFIXES)})"
        )
    sidecar = read_sidecar(weights)
    norm = sidecar.get("normalization") or {}
    return PretrainedSource(
        weights,
        sidecar.get("model"),
        norm.get("mean"),
        norm.get("std"),
        sidecar.get("in_channels"),
        sidecar.get("image_size"),
        recorded=sidecar,
    )


def read_sidecar(weights: Path) -> dict[str, Any]:
    """What `probcl export` recorded about ``weights``: ``WEIGHTS.json`` beside it, else the folder's
    ``config.json`` when it is a probcl export's; {} when there is neither."""
    for candidate in (weights.with_suffix(".json"), weights.parent / EXPORT_CONFIG):
        if candidate == weights or not candidate.is_file():
            continue
        try:
            recorded = json.loads(candidate.read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"cannot read {candidate} ({e}); export the run again with `probcl export`") from None
        if not isinstance(recorded, dict):
            raise ConfigError(f"{candidate} does not hold a JSON object; export the run again with `probcl export`")
        if candidate.name != EXPORT_CONFIG or recorded.get("format") == EXPORT_FORMAT:
            return recorded
    return {}


def pretrained_state(source: PretrainedSource) -> dict[str, torch.Tensor]:
    """The backbone state_dict of a run, or the tensors of a weights file (classifier ``fc.*`` dropped)."""
    if source.run_state is not None:
        return source.run_state
    state: Any  # what the file holds; checked below
    try:
        if source.path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(source.path))
        else:
            state = torch.load(source.path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any decoding failure means the same thing here
        raise ConfigError(f"cannot read weights file {source.path}: {torch_load_problem(source.path, e)}") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConfigError(f"{source.path} does not hold a state_dict (a mapping of parameter names to tensors)")
    return {k: v for k, v in state.items() if not k.startswith(CLASSIFIER_PREFIX)}


def pretrained_backbone(source: PretrainedSource) -> nn.Module:
    """The backbone of the architecture ``source`` records (model fields and input channels), with its weights."""
    if source.model is None or source.channels is None:
        raise ConfigError(
            f"{source.path} has no {EXPORT_CONFIG} (or {source.path.stem}.json) recording its "
            f"architecture and input: keep the {EXPORT_CONFIG} that `probcl export` writes next to "
            f"the weights, or export the run again"
        )
    backbone = build_backbone(from_dict(ModelConfig, source.model, "model"), source.channels)
    load_pretrained_(backbone, source)
    return backbone


def load_pretrained_(backbone: nn.Module, source: PretrainedSource) -> None:
    """Copy the pretrained weights into ``backbone``; every parameter and buffer must match by name and shape."""
    load_state_(backbone, pretrained_state(source), f"init {source.path}")


def load_state_(backbone: nn.Module, state: dict[str, torch.Tensor], what: str) -> None:
    """``backbone.load_state_dict(state)`` after checking names and shapes; one ConfigError naming ``what``
    (e.g. ``init FILE``) and the mismatches otherwise."""
    own = backbone.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [
        f"{k}: file {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
        for k in own
        if k in state and state[k].shape != own[k].shape
    ]
    if missing or unexpected or shapes:
        problems = []
        for label, items in (("missing", missing), ("unexpected", unexpected), ("shape mismatch", shapes)):
            if items:
                problems.append(f"{label} ({len(items)}): {', '.join(items[:4])}{' ...' if len(items) > 4 else ''}")
        raise ConfigError(
            f"{what} does not fit the backbone built from model.* and the data's channels: "
            f"{'; '.join(problems)}. Set model.backbone / model.width / model.norm / model.cifar_stem to the "
            f"pretrained architecture (the config.json that `probcl export` writes records it)."
        )
    backbone.load_state_dict(state)


def _run_backbone(path: Path) -> PretrainedSource:
    """The backbone of a probcl run (directory or .ckpt), read from its checkpoint without building the
    method: the ``backbone.*`` weights, the model config and the data statistics the run recorded."""
    try:
        checkpoint = read_checkpoint(path)
    except RunError as e:
        raise ConfigError(f"init {path}: {e}") from None
    state = checkpoint.backbone_state()
    if not state:
        raise ConfigError(f"init {path}: its checkpoint holds no backbone weights; is it a probcl run?")
    model, info = checkpoint.hyper_parameters["config"]["model"], checkpoint.hyper_parameters["data_info"]
    return PretrainedSource(path, model, info["mean"], info["std"], info["channels"], info["image_size"], state)
