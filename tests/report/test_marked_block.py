"""A generated block between two markers is replaced, and nothing outside it changes."""

import pytest

from probcl.report.marked_block import replace_marked_block, sync_generated

MARKERS = ("<!-- b -->", "<!-- e -->")


def test_only_the_lines_between_the_markers_change():
    text = "head\n<!-- b -->\nold 1\nold 2\n<!-- e -->\ntail\n"
    assert replace_marked_block(text, "new\n", MARKERS, "page") == "head\n<!-- b -->\nnew\n<!-- e -->\ntail\n"


@pytest.mark.parametrize(
    "text",
    ["no markers\n", "<!-- b -->\n<!-- b -->\n<!-- e -->\n", "<!-- e -->\nx\n<!-- b -->\n", "<!-- b -->\nx\n"],
)
def test_missing_doubled_or_reversed_markers_name_the_page(text):
    with pytest.raises(ValueError, match="page.md needs exactly one '<!-- b -->'"):
        replace_marked_block(text, "new\n", MARKERS, "page.md")


def test_sync_lists_changed_and_missing_files_and_writes_them_only_when_not_checking(tmp_path):
    same, changed, missing = tmp_path / "same.md", tmp_path / "changed.md", tmp_path / "missing.md"
    same.write_text("kept\n")
    changed.write_text("old\n")
    files = {same: "kept\n", changed: "new\n", missing: "born\n"}
    assert sync_generated(files, check=True) == [changed, missing]
    assert changed.read_text() == "old\n" and not missing.exists()  # a check writes nothing
    assert sync_generated(files, check=False) == [changed, missing]
    assert [p.read_text() for p in (same, changed, missing)] == ["kept\n", "new\n", "born\n"]
    assert sync_generated(files, check=True) == []
