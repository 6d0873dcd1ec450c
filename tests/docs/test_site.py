"""What the docs site publishes (issue 43 item 14): the build hook is the build's, not a page of the site."""

from __future__ import annotations

from markdown_blocks import ROOT


def test_the_build_hook_is_not_published():
    from mkdocs.config import load_config
    from mkdocs.structure.files import get_files

    config = load_config(str(ROOT / "mkdocs.yml"))
    published = {f.src_uri for f in get_files(config) if not f.inclusion.is_excluded()}
    assert "index.md" in published and "stylesheets/extra.css" in published
    assert "hooks.py" not in published
