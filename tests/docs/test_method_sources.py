"""Facts from the authors' code live in the method pages, with their source (issue 43 item 16): no file cites a
notes file that is not in the repository, and every page a comment points to has the section it names."""

from __future__ import annotations

import re

from markdown_blocks import ROOT

SOURCES = ("probcl", "tests", "benchmarks", "scripts", "docs")
POINTER = re.compile(r"docs/methods/([a-z-]+)\.md#([a-z-]+)")


def _files():
    for folder in SOURCES:
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".yaml", ".md") and "results" not in path.relative_to(ROOT).parts:
                yield path


def test_no_file_cites_the_notes_outside_the_repository():
    notes = "NOTES" + ".md"  # spelled in two pieces: this file names it without citing it
    citing = [str(p.relative_to(ROOT)) for p in _files() if notes in p.read_text()]
    assert citing == []


def test_pointers_to_method_pages_land_on_a_section_that_names_the_authors_repository():
    repositories = {"tau": "github.com/mhw32/temperature-as-uncertainty-public", "ebclr": "github.com/1202kbs/EBCLR"}
    pointed = {match for p in _files() for match in POINTER.findall(p.read_text())}
    assert ("tau", "from-the-authors-code") in pointed and ("ebclr", "from-the-authors-code") in pointed
    for page, anchor in pointed:
        text = (ROOT / "docs" / "methods" / f"{page}.md").read_text()
        heading = next(h for h in re.findall(r"^## (.+)$", text, re.M) if re.sub(r"[^a-z]+", "-", h.lower()) == anchor)
        section = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
        assert repositories[page] in section and "\n> - " in section  # the source, and the facts quoted
