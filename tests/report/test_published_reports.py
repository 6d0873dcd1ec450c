"""Every published report is what its results.json gives today: a report whose results (or whose report code)
changed must be regenerated (``python scripts/readme_study.py --reports``) before it is committed."""

from __future__ import annotations

from pathlib import Path

import pytest

import probcl.report.lipschitz
import probcl.report.plots
from probcl.tasks.benchmark.results import published_report

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = sorted(
    p.parent for p in (ROOT / "docs" / "results").glob("*/results.json") if (p.parent / "report.md").exists()
)


@pytest.mark.parametrize("folder", PUBLISHED, ids=lambda p: p.name)
def test_a_published_report_md_is_its_results_regenerated(folder, monkeypatch):
    def not_written(fig, path, dpi=0):  # the figures' PNGs are not compared (nor rewritten): their links are
        return Path(path)

    monkeypatch.setattr(probcl.report.plots, "save_figure", not_written)
    monkeypatch.setattr(probcl.report.lipschitz, "save_figure", not_written)
    assert (folder / "report.md").read_text() == published_report(folder, ROOT).to_markdown(folder), (
        f"{folder / 'report.md'} is stale; run python scripts/readme_study.py --reports"
    )


def test_the_published_studies_are_checked():
    assert {"study-fmnist-v2", "study-fmnist-long"} <= {p.name for p in PUBLISHED}
