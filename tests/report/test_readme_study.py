"""The README's study block is generated from the published results (never edited by hand), and the verdict
table names the comparison that decides each claim."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from probcl.report.benchmark_report import verdict_table
from probcl.report.claim_stats import ClaimResult, judge
from probcl.report.document import Document
from scripts.readme_study import BEGIN, END
from tests.report.test_claims import study_claims

ROOT = Path(__file__).resolve().parents[2]


def test_readme_and_docs_study_blocks_match_the_published_results():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the checkout under test, whatever an editable install points at
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "readme_study.py"), "--check"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_readme_short_view_keeps_the_full_tables_rows():
    """The README's short table is the docs' full table restricted to its methods and columns: every cell of it
    appears, under the same method and column title, in the study page's table."""

    def table(text: str) -> dict[tuple[str, str], str]:
        block = text.split(BEGIN)[1].split(END)[0].strip().split("\n\n")[0].splitlines()
        header = [h.strip() for h in block[0].strip("|").split("|")]
        rows = [[c.strip() for c in line.strip("|").split("|")] for line in block[2:]]
        return {(row[0], title): cell for row in rows for title, cell in zip(header, row)}

    short, full = table((ROOT / "README.md").read_text()), table((ROOT / "docs" / "study.md").read_text())
    assert len(short) >= 11 * 5 and all(full[key] == cell for key, cell in short.items())


def test_verdict_table_shows_the_weakest_comparison_and_its_reason():
    claim = study_claims()["vem-accuracy"]  # VEM-Langevin - SimCLR, then VEM-SVGD - SimCLR, linear top-1
    by_seed = {
        s: {
            "simclr": {"linear/top1": 80.0},
            "vem-langevin": {"linear/top1": 81.0 + s / 10},
            "vem-svgd": {"linear/top1": v},
        }
        for s, v in enumerate([78.0, 77.5, 78.4])
    }
    result = ClaimResult("vem-accuracy", claim, [judge(c, by_seed) for c in claim.comparisons])
    assert [c.verdict for c in result.comparisons] == ["reproduced", "contradicted"]
    assert result.verdict == "contradicted"
    doc = Document("t")
    verdict_table(doc, [result])
    row = doc.to_markdown(Path("."), title=False).splitlines()[2]
    # VEM-SVGD - SimCLR: -2, -2.5, -1.6 -> mean -2.03; a hand-checked sign and the reason's wording
    assert "**contradicted**" in row and "VEM-SVGD - SimCLR, linear top-1: -2.03 [" in row and "lies below 0" in row
