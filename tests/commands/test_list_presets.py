"""`probcl list presets` gives each preset with a one-line description: the first line of its YAML, a comment
(issue #29, finding 8); a user's own ./configs/<dataset>/<name>.yaml is listed (and found) first."""

from __future__ import annotations

import pytest

from probcl.cli import main
from probcl.core.presets import PRESETS_DIR

PACKAGED = sorted(PRESETS_DIR.rglob("*.yaml"))


@pytest.mark.parametrize("path", PACKAGED, ids=[str(p.relative_to(PRESETS_DIR)) for p in PACKAGED])
def test_every_preset_starts_with_a_one_line_description(path):
    first = path.read_text().splitlines()[0]
    assert first.startswith("# ") and first.endswith(".") and len(first) <= 120, first


def listed(capsys, *group: str) -> dict[str, str]:
    assert main(["list", *group]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "presets:"
    rows = [line.strip().split(None, 1) for line in lines[1:]]
    return {row[0]: row[1] if len(row) > 1 else "" for row in rows}


def test_list_presets_prints_each_name_with_its_first_line(capsys):
    rows = listed(capsys, "presets")
    assert set(rows) == {str(p.relative_to(PRESETS_DIR).with_suffix("")) for p in PACKAGED}
    for name, description in rows.items():
        assert f"# {description}" == (PRESETS_DIR / f"{name}.yaml").read_text().splitlines()[0]
    assert rows["digits/simclr"].startswith("SimCLR on scikit-learn's digits in about a minute")


def test_your_own_config_is_listed_with_its_line_and_found_first(tmp_path, monkeypatch, capsys):
    own = tmp_path / "configs" / "digits" / "simclr.yaml"
    own.parent.mkdir(parents=True)
    own.write_text("# My digits run: width 8.\nmethod: simclr\nmodel: {width: 8}\n")
    (tmp_path / "configs" / "mine.yaml").write_text("method: byol\n")  # no description line: listed bare
    monkeypatch.chdir(tmp_path)
    rows = listed(capsys, "presets")
    assert rows["digits/simclr"] == "My digits run: width 8." and rows["mine"] == ""
    assert main(["pretrain", "--config", "digits/simclr", "--print-config"]) == 0
    assert "  width: 8\n" in capsys.readouterr().out
