"""Reading a run's ``metrics.jsonl`` (torch-free; :mod:`probcl.runs.metrics_log` writes it)."""

from __future__ import annotations

import json
from pathlib import Path

from probcl.core.layout import RunPaths


def read_rows(path: Path) -> list[dict]:
    """The rows of a metrics.jsonl file; a torn last line (a kill mid-write) is ignored."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
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
