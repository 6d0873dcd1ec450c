"""Where the scored rows go: CSV or Parquet, written batch by batch to one binary file handle."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import IO, Any, Protocol

from probcl.errors import ConfigError

FORMATS = {".csv": "csv", ".parquet": "parquet"}


class Sink(Protocol):
    """Column batches in, one file out."""

    def write(self, cols: dict[str, list]) -> None: ...

    def close(self) -> None: ...


class CsvSink:
    """Writes column batches as CSV rows to a binary file handle."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.text = io.TextIOWrapper(fh, encoding="utf-8", newline="", write_through=True)
        self.writer: csv.DictWriter | None = None

    def write(self, cols: dict[str, list]) -> None:
        if self.writer is None:
            self.writer = csv.DictWriter(self.text, fieldnames=list(cols))
            self.writer.writeheader()
        names = list(cols)
        self.writer.writerows(dict(zip(names, row)) for row in zip(*cols.values()))

    def close(self) -> None:
        self.text.flush()
        self.text.detach()


class ParquetSink:
    """Writes column batches as row groups of a Parquet file (needs pyarrow)."""

    def __init__(self, fh: IO[bytes]) -> None:
        import pyarrow.parquet as pq

        self.pq, self.fh = pq, fh
        self.writer: Any = None

    def write(self, cols: dict[str, list]) -> None:
        import pyarrow as pa

        table = pa.table(cols)
        if self.writer is None:
            self.writer = self.pq.ParquetWriter(self.fh, table.schema)
        self.writer.write_table(table)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def output_format(out: Path) -> str:
    """``csv`` or ``parquet`` from the file suffix; Parquet needs pyarrow (checked before any work)."""
    fmt = FORMATS.get(out.suffix.lower())
    if fmt is None:
        raise ConfigError(f"--out {out}: use a .csv or .parquet file name")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
            import pyarrow.parquet  # noqa: F401
        except ImportError:
            raise ConfigError(
                f"writing {out} needs pyarrow: `pip install pyarrow`, or write CSV (--out {out.with_suffix('.csv')})"
            ) from None
    return fmt


def open_sink(fmt: str, fh: IO[bytes]) -> Sink:
    """The sink of ``fmt`` (see :func:`output_format`) writing to ``fh``."""
    return CsvSink(fh) if fmt == "csv" else ParquetSink(fh)


def flagged_rows_hint(out: Path) -> str:
    """How to list the flagged rows of the scores file ``out`` (its ``ood`` column is True)."""
    reader = "read_csv" if FORMATS.get(out.suffix.lower()) == "csv" else "read_parquet"
    return f"the rows of {out} whose ood column is True (pandas: pandas.{reader}({str(out)!r}).query('ood'))"
