"""A run's ``metrics.jsonl``: one row's text, and reading the rows (torch-free; :mod:`probcl.runs.metrics_log`
writes it).

Each line is strict JSON: a value that is not a finite number (a diverged loss) is written ``null``, which any
JSON reader (jq, JavaScript, pandas) accepts, and read back here as ``nan``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from probcl.core.layout import RunPaths


def row_line(row: dict) -> str:
    """One metrics row as its line of strict JSON (newline included); non-finite numbers become ``null``."""
    finite = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
    return json.dumps(finite, allow_nan=False) + "\n"


def read_rows(path: Path) -> list[dict]:
    """The rows of a metrics.jsonl file (``null`` read as ``nan``; ``NaN``/``Infinity``, as runs before strict
    JSON wrote them, read as they were); a torn last line (a kill mid-write) is ignored."""
    return parse_rows(path.read_text()) if path.exists() else []


def parse_rows(text: str) -> list[dict]:
    """The rows of a metrics.jsonl file's ``text`` (see :func:`read_rows`)."""
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        rows.append({k: math.nan if v is None else v for k, v in row.items()})
    return rows


def read_metrics(run: str | Path) -> list[dict]:
    """All rows of a run's metrics.jsonl (empty list when absent)."""
    return read_rows(RunPaths(Path(run)).metrics)


def epoch_curve(run: str | Path, key: str = "monitor/knn_top1") -> list[tuple[int, float]]:
    """(epoch, value) pairs of a per-epoch metric; the last value wins when an epoch was logged twice."""
    curve: dict[int, float] = {}
    for row in read_metrics(run):
        if key in row and "epoch" in row:
            curve[int(row["epoch"])] = float(row[key])
    return sorted(curve.items())
