"""Per-image OOD scores kept on disk (``RUN/ood-scores.npz``): every registered score on the ID calibration half,
the held-out ID test half and each OOD set of an ``ood`` suite run, so that a new combination or deciding rule
can be judged on every run (and benchmark cell) without retraining or re-scoring.

Each array is float16 when its values fit float16's range (|x| < 65504), float32 otherwise (e.g. the input
statistics' distance of noise images); ``meta`` (JSON) records the run, the combination, the calibration seed
and TPR, the kNN k and the set sizes. :func:`load_scores` reads it back as float64 tensors.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from probcl.core.io import atomic_write
from probcl.errors import ConfigError

OOD_SCORES_FILE = "ood-scores.npz"
ID_CALIBRATION = "id_calibration"  # the ID test half the ID-fitted scores are calibrated on
ID_TEST = "id_test"  # the held-out ID test half every metric compares the OOD sets with
FORMAT = 1
_FLOAT16_MAX = float(np.finfo(np.float16).max)


@dataclass
class PerImageScores:
    """``sets[set][score]``: one score per image of the set (ID calibration half, ID test half, each OOD set)."""

    sets: dict[str, dict[str, torch.Tensor]]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def ood_sets(self) -> list[str]:
        return [name for name in self.sets if name not in (ID_CALIBRATION, ID_TEST)]


def _compact(values: torch.Tensor) -> np.ndarray:
    x = values.detach().double().cpu().numpy()
    fits = np.isfinite(x).all() and (np.abs(x).max(initial=0.0) < _FLOAT16_MAX)
    return x.astype(np.float16 if fits else np.float32)


def save_scores(path: Path, scores: PerImageScores) -> int:
    """Write ``scores`` to ``path`` (compressed npz, atomically); returns the file's size in bytes."""
    arrays = {f"{s}/{name}": _compact(v) for s, per_set in scores.sets.items() for name, v in per_set.items()}
    arrays["meta"] = np.array(json.dumps({"format": FORMAT, **scores.meta}))
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)  # type: ignore[arg-type]
    atomic_write(path, lambda fh: fh.write(buffer.getvalue()))
    return path.stat().st_size


def load_scores(path: str | Path) -> PerImageScores:
    """The per-image scores saved at ``path`` (a run's or cell's ``ood-scores.npz``, or a folder holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / OOD_SCORES_FILE
    if not path.exists():
        raise ConfigError(
            f"{path} does not exist: per-image OOD scores are saved by the ood suite "
            f"(`probcl evaluate RUN --suite ood`) from this version on"
        )
    with np.load(path, allow_pickle=False) as npz:
        meta = json.loads(str(npz["meta"]))
        if meta.get("format") != FORMAT:
            raise ConfigError(f"{path}: per-image scores format {meta.get('format')}, this probcl reads {FORMAT}")
        sets: dict[str, dict[str, torch.Tensor]] = {}
        for key in npz.files:
            if key == "meta":
                continue
            set_name, score = key.rsplit("/", 1)  # set names can hold "/" (npz:PATH), score names cannot
            sets.setdefault(set_name, {})[score] = torch.from_numpy(npz[key].astype(np.float64))
    return PerImageScores(sets, meta)
