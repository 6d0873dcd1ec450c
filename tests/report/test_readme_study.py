"""The README's study block is generated from the published results (never edited by hand), and the verdict
table names the comparison that decides each claim."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from probcl.report.benchmark_report import verdict_table
from probcl.report.claim_stats import ClaimResult, judge
from probcl.report.document import Document
from tests.report.test_claims import study_claims

ROOT = Path(__file__).resolve().parents[2]


def test_readme_study_block_matches_the_published_results():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "readme_study.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


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
