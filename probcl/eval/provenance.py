"""Which weights and preprocessing produced a result, so that results of different models are never merged.

Every suite result records in ``protocol.checkpoint`` what was evaluated (:func:`evaluated_model`): the run's
checkpoint (path, epoch, step) or the encoder's source (weights file, backbone), the **sha256 of that file's
content** (``state_sha256``, of the tensors, for a module handed over in Python) and the preprocessing (dataset,
channels, size, normalisation). Two records describe one model when their hashes and preprocessing agree
(:func:`same_model`); a folder's eval.json only ever holds one model's results (see :mod:`probcl.tasks.evaluate`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from probcl.data.info import DataInfo
from probcl.models.encoder import ForeignEncoder

HASH_KEYS = ("sha256", "state_sha256")  # the content hash of a record: of its file, or of its tensors
CHUNK = 1 << 20


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes (what ``sha256sum FILE`` prints)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def state_sha256(module: nn.Module) -> str:
    """sha256 of a module's state_dict: each tensor's name, dtype, shape and bytes, in name order."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}:{flat.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def evaluated_model(source: dict[str, Any], info: DataInfo, content: str | Path | nn.Module) -> dict[str, Any]:
    """``source`` (checkpoint path, epoch, step; or an encoder's weights and backbone) with the content hash of
    ``content``: a file's (``sha256``) or, for a module without a file, its tensors' (``state_sha256``); and the
    preprocessing."""
    digest = (
        {"state_sha256": state_sha256(content)} if isinstance(content, nn.Module) else {"sha256": file_sha256(content)}
    )
    # the class names label the outputs; they do not change what the model computes, so they are not preprocessing
    preprocessing = {key: value for key, value in asdict(info).items() if key != "class_names"}
    return json.loads(json.dumps({**source, **digest, "preprocessing": preprocessing}, default=str))


def encoder_record(encoder: ForeignEncoder) -> dict[str, Any]:
    """:func:`evaluated_model` of a foreign encoder: its weights file's hash, or its module's."""
    weights = encoder.source.get("weights")
    return evaluated_model(encoder.source, encoder.data_info, encoder.module if weights is None else weights)


def same_model(recorded: Any, current: dict[str, Any]) -> bool:
    """Whether a result's recorded ``protocol.checkpoint`` is the model ``current`` describes: the same content
    hash and preprocessing. A run's record from before hashes were kept counts as the same when its epoch and
    optimiser step match (the run directory is the same; a retrain in place moves the old run aside)."""
    if not isinstance(recorded, dict):
        return False
    for key in HASH_KEYS:
        if key in recorded or key in current:
            return recorded.get(key) == current.get(key) and recorded.get("preprocessing") == current.get(
                "preprocessing"
            )
    return False


def legacy_same_run(recorded: Any, current: dict[str, Any]) -> bool:
    """A run's result recorded before content hashes: the same epoch and global step as ``current``."""
    return (
        isinstance(recorded, dict)
        and not any(key in recorded for key in HASH_KEYS)
        and "global_step" in recorded
        and (recorded.get("epoch"), recorded.get("global_step")) == (current.get("epoch"), current.get("global_step"))
    )


def model_tag(record: dict[str, Any]) -> str:
    """8 hex digits naming a model record (its content hash and preprocessing), for folder and file names."""
    if not any(key in record for key in HASH_KEYS):
        return "unhashed"
    identity = {k: record.get(k) for k in (*HASH_KEYS, "preprocessing")}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:8]


def describe(record: Any) -> str:
    """A short description of a recorded model for messages: its file, hash prefix, epoch/step."""
    if not isinstance(record, dict):
        return "an unrecorded model"
    where = record.get("path") or record.get("weights") or record.get("module") or record.get("encoder")
    parts = [str(where)]
    digest = record.get("sha256") or record.get("state_sha256")
    parts.append(f"sha256 {digest[:12]}" if digest else "no content hash")
    if record.get("global_step") is not None:
        parts.append(f"epoch {record.get('epoch')}, step {record.get('global_step')}")
    preprocessing = record.get("preprocessing")
    if isinstance(preprocessing, dict) and preprocessing.get("dataset"):
        parts.append(f"on {preprocessing['dataset']}")
    return ", ".join(parts)
