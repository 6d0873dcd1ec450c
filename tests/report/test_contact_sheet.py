"""The contact sheet's captions wrap between words; only file names (one long word) may break anywhere."""

from __future__ import annotations

import re

import numpy as np

from probcl.report.contact_sheet import STYLE, Section, contact_sheet_html


def css_rules(style: str) -> dict[str, str]:
    return {selector.strip(): body for selector, body in re.findall(r"([^{}]+)\{([^}]*)\}", style)}


def test_captions_wrap_at_words_and_only_names_break_anywhere():
    long_name = "a_very_long_file_name_without_any_spaces_at_all_0123456789.png"
    item = {
        "image": np.zeros((1, 8, 8), dtype=np.uint8),
        "id": f"/data/{long_name}",
        "ood": True,
        "flagged_by": "knn10;feature_norm;input_stats",
        "combined": 12.5,
    }
    html = contact_sheet_html("t", [], [Section("Flagged", [item])], ["combined"], {"/data/x.png": "truncated file"})
    rules = css_rules(STYLE)
    # no rule breaks words mid-word, and only the file name and the skipped paths may break anywhere
    assert not any("break-all" in body for body in rules.values())
    assert {sel for sel, body in rules.items() if "anywhere" in body} == {".name", ".skipped code"}
    assert f'<b class="name">{long_name}</b>' in html
    # the scores that flagged the image are separate words, so the caption can wrap between them
    assert "OOD: knn10, feature_norm, input_stats" in html
    assert "<li><code>/data/x.png</code>: truncated file</li>" in html
