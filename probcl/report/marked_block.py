"""Generated blocks inside hand-written Markdown: the lines between a begin and an end marker are a program's
output (a study's tables, its costs), rewritten by that program and never edited by hand."""

from __future__ import annotations


def replace_marked_block(text: str, block: str, markers: tuple[str, str], where: str) -> str:
    """``text`` with everything between the ``markers`` (begin, end) replaced by ``block``.

    Raises ValueError naming ``where`` unless each marker occurs exactly once, begin before end."""
    begin, end = markers
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"{where} needs exactly one {begin!r} line and, after it, one {end!r} line")
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    return f"{head}{begin}\n{block}{end}{tail}"
