"""A generated block between two markers is replaced, and nothing outside it changes."""

import pytest

from probcl.report.marked_block import replace_marked_block

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
