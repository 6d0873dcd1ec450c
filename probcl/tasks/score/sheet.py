"""What ``probcl score`` writes beside the scores file: the ``.json`` sidecar (protocol, thresholds, counts,
skipped files) and the HTML contact sheet's content (every flagged image, or where the rest are listed; the
accepted images' extremes; the skipped files with their reasons)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probcl.core.io import atomic_write_json, atomic_write_text
from probcl.eval.ood_scores.calibration import COMBINED
from probcl.report.contact_sheet import Section, contact_sheet_html
from probcl.tasks.score.extremes import SheetPicks
from probcl.tasks.score.sinks import flagged_rows_hint


@dataclass
class ScoreSummary:
    """What `score_dataset` wrote."""

    out: Path
    sidecar: Path
    rows: int
    skipped: dict[str, str]  # unreadable file -> why
    thresholds: dict[str, float]  # decision statistic -> its threshold T on -log(p / w)
    tail_thresholds: dict[str, float]  # deciding score -> the tail probability it flags below: w exp(-T)
    score: str
    tpr: float
    combination: list[str]
    flagged: int
    flagged_by: dict[str, int]
    cache: dict[str, Any]
    html: Path | None = None
    protocol: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the user should know (the reference's notes)


def write_sidecar(summary: ScoreSummary, run: str | Path, data: str, checkpoint_meta: Any) -> None:
    """``summary.sidecar``: the run, data, counts, thresholds (T and the tail probabilities per deciding score),
    skipped files with their reasons, protocol, checkpoint and cache."""
    atomic_write_json(
        summary.sidecar,
        {
            "run": str(run),
            "data": data,
            "out": str(summary.out),
            "rows": summary.rows,
            "flagged": summary.flagged,
            "flagged_by": summary.flagged_by,
            "skipped": list(summary.skipped),
            "skipped_reasons": summary.skipped,
            "score": summary.score,
            "thresholds": summary.thresholds,
            "tail_thresholds": summary.tail_thresholds,
            "protocol": summary.protocol,
            "checkpoint": checkpoint_meta,
            "cache": summary.cache,
        },
    )


def threshold_line(summary: ScoreSummary) -> str:
    """The tail probability each deciding score flags below, in one sentence."""
    below = ", ".join(f"{name} {p:.3g}" for name, p in summary.tail_thresholds.items())
    return f"an image is flagged when a score's tail probability under the training data is below: {below}"


def sheet_sections(summary: ScoreSummary, picks: SheetPicks) -> list[Section]:
    """Every flagged image (most unusual first; when there are more than the sheet holds, the note says where
    all are listed), then the accepted images with the highest and the lowest deciding score."""
    flagged, shown = summary.flagged, picks.flagged.items()
    if not flagged:
        note = f"none of the {summary.rows} images was flagged"
    elif len(shown) < flagged:
        note = (
            f"showing the {len(shown)} most unusual of the {flagged} flagged images; "
            f"all {flagged} are {flagged_rows_hint(summary.out)}"
        )
    else:
        note = ""
    accepted = summary.rows - flagged
    none_accepted = "" if accepted else "no image was accepted as in-distribution"
    return [
        Section(f"Flagged as out-of-distribution: {flagged} of {summary.rows} images", shown, note),
        Section(
            "Least typical accepted images (highest OOD score below the threshold)",
            picks.least_typical.items(),
            none_accepted,
        ),
        Section("Most typical accepted images (lowest OOD score)", picks.most_typical.items(), none_accepted),
    ]


def write_contact_sheet(summary: ScoreSummary, picks: SheetPicks, run: str | Path, data: str) -> None:
    """``summary.html``: the summary lines, :func:`sheet_sections` and the skipped files with their reasons."""
    assert summary.html is not None
    lines = [
        f"run: {run}",
        f"{summary.rows} images scored, {summary.flagged} flagged as out-of-distribution "
        f"(decision: {summary.score}, {summary.tpr:.0%} of ID images accepted)",
        threshold_line(summary),
    ]
    if summary.skipped:
        lines.append(f"{len(summary.skipped)} unreadable file(s) skipped, listed at the end with the reason for each")
    fields = [COMBINED, *(f"p:{n}" for n in summary.combination)]
    page = contact_sheet_html(f"probcl score: {data}", lines, sheet_sections(summary, picks), fields, summary.skipped)
    atomic_write_text(summary.html, page)
