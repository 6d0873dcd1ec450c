"""Fenced code blocks of the docs' Markdown pages, and the convention that says which of them run.

A block whose language is a shell or Python (:data:`RUNNABLE`) claims to run. It is executed by a test when its
page is listed in :data:`EXECUTED` (the tutorials, by ``test_tutorials.py``; the worked example of
``docs/adding-a-method.md``, by ``tests/methods/test_adding_a_method.py``; that of ``docs/adding-a-score.md``, by
``tests/eval/test_adding_a_score.py``; the README's Python example, by
``test_docs_blocks.py``); anywhere else the line right above it must say why it is not run::

    <!-- not run: needs a GPU -->
    ```bash
    probcl pretrain --config cifar10/simclr --devices 4 --strategy ddp
    ```
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNABLE = {"bash", "sh", "shell", "console", "python", "py", "pycon"}
NOT_RUN = re.compile(r"^<!-- not run: (\S.*\S) -->$")
FENCE = re.compile(r"^```(\S*)(.*)$")
# page -> the test that executes its runnable blocks
EXECUTED = {
    "docs/tutorials/your-images.md": "tests/docs/test_tutorials.py",
    "docs/tutorials/compare-methods.md": "tests/docs/test_tutorials.py",
    "docs/tutorials/uncertainty-ood.md": "tests/docs/test_tutorials.py",
    "docs/adding-a-method.md": "tests/methods/test_adding_a_method.py",
    "docs/adding-a-score.md": "tests/eval/test_adding_a_score.py",
}


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, the rest of its info string, its text, and the reason it is not run."""

    page: str
    line: int
    language: str
    attributes: str
    code: str
    not_run: str | None

    @property
    def runnable(self) -> bool:
        return self.language in RUNNABLE

    @property
    def title(self) -> str | None:
        """The block's ``title="..."`` attribute (a YAML block's file name in a tutorial)."""
        found = re.search(r'title="([^"]+)"', self.attributes)
        return found.group(1) if found else None


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file, in order."""
    lines = path.read_text().splitlines()
    page = str(path.relative_to(ROOT))
    found, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        marker = NOT_RUN.match(lines[i - 1]) if i > 0 else None
        language, attributes = fence.group(1).strip("{ ."), fence.group(2)
        found.append(Block(page, i + 1, language, attributes, "\n".join(lines[i + 1 : end]) + "\n",
                           marker.group(1) if marker else None))  # fmt: skip
        i = end + 1
    return found


def shell_commands(code: str) -> list[str]:
    """The commands of a shell block: comment lines dropped, backslash continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def docs_pages() -> list[Path]:
    """Every Markdown page of the site (docs/, without the committed run reports under docs/results/) and the
    README."""
    pages = [p for p in sorted((ROOT / "docs").rglob("*.md")) if "results" not in p.relative_to(ROOT / "docs").parts]
    return [ROOT / "README.md", *pages]
