"""``metrics.jsonl``: one JSON row per logged metrics dict, kept free of duplicates across resumes."""

from __future__ import annotations

import csv
import errno
import io
import os
from pathlib import Path
from typing import Any

from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.loggers import Logger

from probcl.core.io import atomic_write_text, write_error
from probcl.core.metrics_file import parse_rows, read_rows, row_line
from probcl.errors import RunError


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
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        line = row_line({"step": step, **{k: float(v) for k, v in metrics.items()}}).encode()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            try:
                size = os.fstat(fd).st_size
                try:
                    if os.write(fd, line) != len(line):
                        raise OSError(errno.ENOSPC, "short write (disk full?)")
                except OSError:
                    os.ftruncate(fd, size)  # no torn row: the file stays as it was
                    raise
            finally:
                os.close(fd)
        except OSError as e:
            raise write_error(self.path, e) from None

    @rank_zero_only
    def forget_from(self, step: int) -> None:
        """Drop the rows of steps >= ``step``: on resume from a checkpoint taken after ``step`` optimiser
        steps, those batches run again and log their rows again (Lightning logs batch ``k``'s row,
        and the epoch rows, with ``step = k - 1``). A torn line (a kill mid-append) goes too: the rows
        appended next must start on a line of their own."""
        if not self.path.exists():
            return
        written = self.path.read_text()
        kept = "".join(row_line(row) for row in parse_rows(written) if row["step"] < step)
        if kept != written:
            atomic_write_text(self.path, kept)

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
        try:
            atomic_write_text(self.csv_path, buffer.getvalue())
        except RunError:
            if status == "success":
                raise  # after a failure, that failure is the error to report (the csv is rewritten next time)
