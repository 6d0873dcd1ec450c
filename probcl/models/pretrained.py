"""Pretrained backbones for post-hoc methods: from a probcl run, or from a plain weights file.

``init`` is either a probcl run directory / ``.ckpt`` file (any method), or a state_dict of a
backbone stored as ``.safetensors`` / ``.pt`` / ``.pth`` / ``.bin`` (what `probcl export`
writes, or torchvision ResNet weights). Runs and exported files (their ``.json`` sidecar)
also say which architecture and input normalization the backbone was trained with.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from probcl.config import ConfigError, to_plain
from probcl.core.io import read_json
from probcl.core.runs import RunError, load

RUN_SUFFIXES = (".ckpt",)
WEIGHT_SUFFIXES = (".safetensors", ".pt", ".pth", ".bin")
BACKBONE_FIELDS = ("backbone", "width", "pool", "norm", "act", "cifar_stem")  # ModelConfig keys that shape the backbone
CLASSIFIER_PREFIX = "fc."  # torchvision ResNet classifier: probcl backbones have none


@dataclass
class PretrainedSource:
    """What is known about a pretrained backbone before its weights are read."""

    path: Path
    model: dict | None = None  # its ModelConfig as a dict, when recorded
    mean: list[float] | None = None  # the input normalization it was trained with, when recorded
    std: list[float] | None = None
    run_state: dict[str, torch.Tensor] | None = None  # a run's backbone weights, read with its config


def describe_pretrained(init: str | None, method: str) -> PretrainedSource:
    """Identify ``init`` (run or weights file) and read its recorded architecture; clear errors otherwise."""
    if not init:
        raise ConfigError(f"method {method!r} trains on top of a pretrained encoder: pass --init RUN_DIR "
                          f"(a probcl run or .ckpt) or --init WEIGHTS ({', '.join(WEIGHT_SUFFIXES)})")
    path = Path(init)
    if not path.exists():
        raise ConfigError(f"init {path} does not exist; pass a probcl run directory, a .ckpt file, or a backbone "
                          f"weights file ({', '.join(WEIGHT_SUFFIXES)})")
    if path.is_dir() or path.suffix in RUN_SUFFIXES:
        model = _load_run(path)
        return PretrainedSource(path, to_plain(model.cfg.model), model.data_info.mean, model.data_info.std,
                                model.backbone.state_dict())
    if path.suffix not in WEIGHT_SUFFIXES:
        raise ConfigError(f"init {path}: unknown file type {path.suffix!r}; expected a run directory, .ckpt, "
                          f"or weights ({', '.join(WEIGHT_SUFFIXES)})")
    sidecar = read_json(path.with_suffix(".json"), {}) or {}
    norm = sidecar.get("normalization") or {}
    return PretrainedSource(path, sidecar.get("model"), norm.get("mean"), norm.get("std"))


def pretrained_state(source: PretrainedSource) -> dict[str, torch.Tensor]:
    """The backbone state_dict of a run, or the tensors of a weights file (classifier ``fc.*`` dropped)."""
    if source.run_state is not None:
        return source.run_state
    try:
        if source.path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(source.path))
        else:
            state = torch.load(source.path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any decoding failure means the same thing here
        raise ConfigError(f"cannot read weights file {source.path}: {e}") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConfigError(f"{source.path} does not hold a state_dict (a mapping of parameter names to tensors)")
    return {k: v for k, v in state.items() if not k.startswith(CLASSIFIER_PREFIX)}


def load_pretrained_(backbone: nn.Module, source: PretrainedSource) -> None:
    """Copy the pretrained weights into ``backbone``; every parameter and buffer must match by name and shape."""
    state = pretrained_state(source)
    own = backbone.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [f"{k}: file {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
              for k in own if k in state and state[k].shape != own[k].shape]
    if missing or unexpected or shapes:
        problems = []
        for label, items in (("missing", missing), ("unexpected", unexpected), ("shape mismatch", shapes)):
            if items:
                problems.append(f"{label} ({len(items)}): {', '.join(items[:4])}{' ...' if len(items) > 4 else ''}")
        raise ConfigError(
            f"init {source.path} does not fit the backbone built from model.* and the data's channels: "
            f"{'; '.join(problems)}. Set model.backbone / model.width / model.norm / model.cifar_stem to the "
            f"pretrained architecture (`probcl export` writes a .json sidecar that records it)."
        )
    backbone.load_state_dict(state)


def _load_run(path: Path):
    try:
        return load(path, device="cpu")
    except RunError as e:
        raise ConfigError(f"init {path}: {e}") from None

