"""A run's features on disk, ``RUN/feature-cache/``: one file per checkpoint, feature layer, precision, device and
dataset split, so that ``probcl evaluate --suite linear`` and a later ``--suite knn`` of the same checkpoint run
the encoder once.

A file holds its key; it is used only when the key matches the one asked for (the checkpoint's path, size and
modification time among it), and an unreadable one is recomputed and rewritten. Features that bf16 holds
exactly (those extracted in bf16) are stored in bf16, half the size; others in float32.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from probcl.core.layout import results_folder
from probcl.errors import RunError
from probcl.runtime.torch_files import atomic_torch_save

FORMAT = 1  # the stored layout: {"key", "features", "labels"}


def cache_path(run: Path, key: dict[str, Any]) -> Path:
    """``RUN/feature-cache/features-{digest}.pt``, the digest of ``key``."""
    digest = hashlib.sha256(json.dumps({"format": FORMAT, **key}, sort_keys=True).encode()).hexdigest()[:16]
    return results_folder(run) / "feature-cache" / f"features-{digest}.pt"


def read_features(path: Path, key: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(float32 features, labels) stored at ``path`` under ``key``; None when absent, unreadable or stored under
    another key."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if state["key"] != {"format": FORMAT, **key}:
            return None
        return state["features"].float(), state["labels"]
    except Exception:  # noqa: BLE001 - absent, damaged or of another layout: the features are recomputed
        return None


def write_features(path: Path, key: dict[str, Any], features: torch.Tensor, labels: torch.Tensor) -> str | None:
    """Store ``features`` and ``labels`` at ``path`` under ``key`` (atomically); a folder that cannot be written
    costs speed, not results: the reason is returned (None when stored)."""
    exact_in_bf16 = torch.equal(features.bfloat16().float(), features)
    state = {"key": {"format": FORMAT, **key}, "features": features.bfloat16() if exact_in_bf16 else features}
    try:
        atomic_torch_save(path, {**state, "labels": labels})
    except RunError as e:
        return str(e)
    return None
