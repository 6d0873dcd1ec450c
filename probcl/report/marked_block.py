"""Generated blocks inside hand-written Markdown: the lines between a begin and an end marker are a program's
output (a study's tables, its costs), rewritten by that program and never edited by hand."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from probcl.core.io import atomic_write_text


def replace_marked_block(text: str, block: str, markers: tuple[str, str], where: str) -> str:
    """``text`` with everything between the ``markers`` (begin, end) replaced by ``block``.

    Raises ValueError naming ``where`` unless each marker occurs exactly once, begin before end."""
    begin, end = markers
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"{where} needs exactly one {begin!r} line and, after it, one {end!r} line")
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    return f"{head}{begin}\n{block}{end}{tail}"


def sync_generated(files: Mapping[Path, str], check: bool) -> list[Path]:
    """The generated files whose text on disk is not ``files[path]`` (missing ones included), in ``files``' order.

    Unless ``check``, each of them is written (atomically, so an interrupted run leaves the old text); with
    ``check`` nothing is written, and a generator's ``--check`` fails when the list is not empty."""
    stale = [path for path, text in files.items() if not path.exists() or path.read_text() != text]
    if not check:
        for path in stale:
            atomic_write_text(path, files[path])
    return stale
