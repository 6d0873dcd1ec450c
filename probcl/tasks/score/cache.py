"""The fitted ID reference's cache, ``RUN/score-cache/``: one file per run, training dataset and the options
that shape the reference, valid for the checkpoint it was fitted on (its path, size and modification time)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import torch

from probcl.errors import RunError
from probcl.eval import id_reference
from probcl.eval.ood_scores import SCORES, calibration, tails
from probcl.runtime.torch_files import atomic_torch_save
from probcl.tasks.score.options import ScoreOptions


def reference_version() -> str:
    """The cache key's version: a digest of the OOD-score registry and the modules that fit, calibrate and save
    the reference, so that it changes by itself whenever a score, its fitting or the saved layout changes."""
    return SCORES.fingerprint([id_reference, calibration, tails])


def cache_file(run: Path, dataset: str, options: ScoreOptions, kind: str = "reference", suffix: str = ".pt") -> Path:
    """``RUN/score-cache/{kind}-{digest}{suffix}``: one file per run, training dataset and reference options."""
    fields = {"version": reference_version(), "dataset": dataset, **options.cache_fields()}
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
    return (run if run.is_dir() else run.parent) / "score-cache" / f"{kind}-{digest}{suffix}"


def read_cache(path: Path, identity: dict[str, Any]) -> dict | None:
    """The cached state at ``path`` if it was fitted on the checkpoint ``identity`` (else None)."""
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - an unreadable cache is refitted and rewritten
        return None
    return state if state.get("checkpoint") == identity else None


def write_cache(path: Path, state: dict) -> str | None:
    """Store ``state`` at ``path``; a run directory that cannot be written costs speed, not the scores: then
    one line says so and the reason is returned (None when stored)."""
    try:
        atomic_torch_save(path, state)
    except RunError as e:
        print(f"probcl score: the fitted reference is not cached ({e})", file=sys.stderr)
        return str(e)
    return None
