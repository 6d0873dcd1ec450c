"""A self-contained HTML contact sheet of scored images: thumbnails embedded as PNG data URIs, each
captioned with its id, OOD flag, the score(s) that flagged it and chosen score columns, in sections
(:class:`Section`), then the files that could not be read, with the reason for each."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

import numpy as np
from PIL import Image

THUMBNAIL_PX = 96  # displayed size; small images are upscaled without smoothing

# Captions wrap between words; only a file name (one long word, no spaces) may break anywhere.
STYLE = f"""
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }}
.grid {{ display: flex; flex-wrap: wrap; gap: 12px; }}
figure {{ margin: 0; width: {THUMBNAIL_PX + 70}px; font-size: 11px; }}
figure img {{ width: {THUMBNAIL_PX}px; height: {THUMBNAIL_PX}px; image-rendering: pixelated; border: 3px solid #2a7; }}
figure.ood img {{ border-color: #d33; }}
.name {{ overflow-wrap: anywhere; }}
.flag {{ font-weight: bold; color: #d33; }}
.skipped code {{ overflow-wrap: anywhere; }}
"""


@dataclass(frozen=True)
class Section:
    """A heading, a grid of images (dicts with ``image``, ``id``, ``ood``, ``flagged_by``, ``most_unusual`` and
    the fields shown under each thumbnail), and a ``note`` under the heading (e.g. where the images that are
    not shown are listed; also shown when there are no images)."""

    heading: str
    items: Sequence[Mapping[str, Any]]
    note: str = ""


def png_data_uri(image: Any) -> str:
    """A uint8 (C, H, W) image (a NumPy array, or anything ``np.asarray`` takes: a CPU tensor) as a
    ``data:image/png;base64,...`` URI."""
    array = np.asarray(image).astype(np.uint8)
    pil = Image.fromarray(array[0] if array.shape[0] == 1 else array.transpose(1, 2, 0))
    buffer = io.BytesIO()
    pil.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _format(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _figure(item: Mapping[str, Any], fields: Sequence[str]) -> str:
    name = PurePath(str(item["id"])).name or str(item["id"])
    flagged = bool(item.get("ood"))
    reasons = ", ".join(s for s in str(item.get("flagged_by") or "").split(";") if s)  # ", ": wraps between scores
    why = (
        f'<span class="flag">OOD: {html.escape(reasons)}</span>'
        if flagged
        else f"in-distribution; most unusual: {html.escape(str(item.get('most_unusual', '')))}"
    )
    values = "<br>".join(f"{html.escape(f)} = {html.escape(_format(item[f]))}" for f in fields if f in item)
    return (
        f'<figure class="{"ood" if flagged else "id"}"><img src="{png_data_uri(item["image"])}" '
        f'alt="{html.escape(name)}"><figcaption><b class="name">{html.escape(name)}</b><br>{why}<br>{values}'
        f"</figcaption></figure>"
    )


def _section(section: Section, fields: Sequence[str]) -> list[str]:
    parts = [f"<h2>{html.escape(section.heading)}</h2>"]
    if section.note:
        parts.append(f"<p>{html.escape(section.note)}</p>")
    if section.items:
        parts += ["<div class='grid'>", *(_figure(item, fields) for item in section.items), "</div>"]
    return parts


def _skipped(skipped: Mapping[str, str]) -> list[str]:
    rows = (f"<li><code>{html.escape(path)}</code>: {html.escape(reason)}</li>" for path, reason in skipped.items())
    count = len(skipped)
    return [
        f"<h2>Skipped: {count} unreadable file{'s' if count != 1 else ''}</h2>",
        "<ul class='skipped'>",
        *rows,
        "</ul>",
    ]


def contact_sheet_html(
    title: str,
    lines: Sequence[str],
    sections: Sequence[Section],
    fields: Sequence[str],
    skipped: Mapping[str, str] | None = None,
) -> str:
    """One HTML page: ``title``, summary ``lines``, the ``sections`` (each image captioned with the ``fields``),
    then the ``skipped`` files (path -> why it could not be read), when there are any."""
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
    ]
    parts += [f"<p>{html.escape(line)}</p>" for line in lines]
    for section in sections:
        parts += _section(section, fields)
    if skipped:
        parts += _skipped(skipped)
    parts.append("</body></html>")
    return "\n".join(parts)
