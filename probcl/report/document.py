"""A small report document (headings, paragraphs, tables, figures) rendered to Markdown and to
self-contained HTML (figures embedded as base64 PNG data URIs)."""

from __future__ import annotations

import base64
import html
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Paragraph:
    text: str


@dataclass
class Table:
    header: Sequence[str]
    rows: Sequence[Sequence[str]]


@dataclass
class Figure:
    path: Path
    caption: str = ""


Block = Heading | Paragraph | Table | Figure

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222;
       box-sizing: border-box; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f2f2f2; }
figure { display: inline-block; margin: 0.5em; vertical-align: top; max-width: 100%; }
figcaption { font-size: 0.85em; color: #555; max-width: 600px; }
img { max-width: 100%; }
.wide { overflow-x: auto; }
code { background: #f4f4f4; padding: 0 0.2em; }
"""


@dataclass
class Document:
    """An ordered list of blocks with a title."""

    title: str
    blocks: list[Block] = field(default_factory=list)

    def heading(self, text: str, level: int = 2) -> None:
        self.blocks.append(Heading(text, level))

    def paragraph(self, text: str) -> None:
        self.blocks.append(Paragraph(text))

    def table(self, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        if rows:
            self.blocks.append(Table(header, rows))

    def figure(self, path: Path, caption: str = "") -> None:
        self.blocks.append(Figure(Path(path), caption))

    def to_markdown(self, relative_to: Path, title: bool = True) -> str:
        """Markdown; figures are linked by their path relative to the report's folder. ``title=False`` leaves
        out the title heading (a block to paste into another document)."""
        lines = [f"# {self.title}", ""] if title else []
        for block in self.blocks:
            if isinstance(block, Heading):
                lines += [f"{'#' * block.level} {block.text}", ""]
            elif isinstance(block, Paragraph):
                lines += [block.text, ""]
            elif isinstance(block, Table):
                lines.append("| " + " | ".join(_md_cell(h) for h in block.header) + " |")
                lines.append("|" + "|".join(["---"] + ["---:"] * (len(block.header) - 1)) + "|")
                lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows]
                lines.append("")
            else:
                rel = Path(os.path.relpath(block.path, relative_to)).as_posix()
                lines += [f"![{block.caption}]({rel})", ""] + ([f"*{block.caption}*", ""] if block.caption else [])
        return "\n".join(lines).rstrip() + "\n"

    def to_html(self) -> str:
        """One HTML file with the figures embedded."""
        parts = [
            "<!DOCTYPE html>",
            "<html><head><meta charset='utf-8'>",
            f"<title>{html.escape(self.title)}</title>",
            f"<style>{STYLE}</style></head><body>",
            f"<h1>{html.escape(self.title)}</h1>",
        ]
        for block in self.blocks:
            if isinstance(block, Heading):
                parts.append(f"<h{block.level}>{html.escape(block.text)}</h{block.level}>")
            elif isinstance(block, Paragraph):
                parts.append(f"<p>{_inline_code(html.escape(block.text))}</p>")
            elif isinstance(block, Table):
                # a table of label/value pairs has no header: Markdown needs an empty one, HTML none
                head = "".join(f"<th>{_inline_code(html.escape(str(h)))}</th>" for h in block.header)
                thead = f"<thead><tr>{head}</tr></thead>" if any(str(h) for h in block.header) else ""
                body = "".join(
                    "<tr>" + "".join(f"<td>{_inline_code(html.escape(str(c)))}</td>" for c in row) + "</tr>"
                    for row in block.rows
                )
                parts.append(f"<div class='wide'><table>{thead}<tbody>{body}</tbody></table></div>")
            else:
                data = base64.b64encode(block.path.read_bytes()).decode()
                parts.append(
                    f"<figure><img src='data:image/png;base64,{data}' alt='{html.escape(block.caption)}'>"
                    f"<figcaption>{html.escape(block.caption)}</figcaption></figure>"
                )
        parts.append("</body></html>")
        return "\n".join(parts) + "\n"


def _md_cell(value: object) -> str:
    return str(value).replace("|", "\\|")


def _inline_code(text: str) -> str:
    """`code` spans of an escaped paragraph or table cell -> <code> elements."""
    pieces = text.split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(pieces))
