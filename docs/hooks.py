"""MkDocs hook: replace each ``<!-- generated: NAME -->`` line with the block ``scripts/docs_reference.py`` generates
(the configuration and CLI references), so those pages are read from the code on every build."""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^<!-- generated: ([a-z-]+(?: [a-z0-9-]+)?) -->$", re.M)


@functools.cache
def _blocks() -> dict[str, str]:
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "scripts" / "docs_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.generated_blocks()


def on_page_markdown(markdown: str, page, config, files) -> str:
    names = MARKER.findall(markdown)
    if not names:
        return markdown
    blocks = _blocks()
    unknown = sorted(set(names) - set(blocks))
    if unknown:
        known = ", ".join(blocks)
        raise ValueError(f"{page.file.src_uri}: unknown generated block(s) {', '.join(unknown)}; known: {known}")
    return MARKER.sub(lambda m: blocks[m.group(1)], markdown)
