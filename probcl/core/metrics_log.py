"""``metrics.jsonl``: one JSON row per logged metrics dict, kept free of duplicates across resumes."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Optional

from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.loggers import Logger

from probcl.core.io import atomic_write_text


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


class JsonlLogger(Logger):
    """Appends every logged metrics dict as one JSON line to ``metrics.jsonl`` (rank 0 only), and
    rewrites ``metrics.csv`` (one column per metric) from the whole history when training ends,
    so that a resumed run keeps every row in both files."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = Path(path)
        self.csv_path = self.path.with_suffix(".csv")

    @property
    def name(self) -> str:
        return "jsonl"

    @property
    def version(self) -> str:
        return "0"

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: Optional[int] = None) -> None:
        row = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")

    @rank_zero_only
    def forget_from(self, step: int) -> None:
        """Drop the rows of steps >= ``step``: on resume from a checkpoint taken after ``step`` optimiser
        steps, those batches run again and log their rows again (Lightning logs batch ``k``'s row,
        and the epoch rows, with ``step = k - 1``)."""
        rows = read_rows(self.path)
        kept = [row for row in rows if row["step"] < step]
        if len(kept) != len(rows):
            atomic_write_text(self.path, "".join(json.dumps(row) + "\n" for row in kept))

    @rank_zero_only
    def finalize(self, status: str) -> None:
        if not self.path.exists():
            return
        rows = read_rows(self.path)
        columns = list(dict.fromkeys(key for row in rows for key in row))
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(self.csv_path, buffer.getvalue())
