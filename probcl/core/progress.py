"""A quiet-when-piped progress bar for long loops outside Lightning (rich)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate with a rich progress bar on the standard error when it is a terminal; plain iteration otherwise.
    The bar never writes to the standard output, which belongs to a command's results (and, for a library call
    such as :func:`probcl.evaluate`, to the caller)."""
    if not sys.stderr.isatty() or os.environ.get("PROBCL_NO_PROGRESS"):
        yield from items
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        for item in items:
            yield item
            bar.advance(task)


def print_table(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """Print a table with rich."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in header:
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    Console().print(table)
