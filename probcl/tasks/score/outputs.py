"""The files one ``probcl score`` writes, named and checked before any image is scored.

``--out`` names the scores; next to it go its summary (``OUT.json``) and, when files could not be read, their
list (``OUT.unreadable.txt``); ``--html`` names the contact sheet. None may be a folder or lie under a file, the
sheet may not be one of the others, and the summary may replace only an earlier score summary: ``--out
RUN/eval.csv`` would otherwise put it over the run's evaluation results.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from probcl.core.io import output_path_problem, refuse_foreign_side_file
from probcl.errors import ConfigError

SUMMARY_KEYS = frozenset({"run", "data", "out", "rows", "thresholds"})  # what every score summary holds


@dataclass(frozen=True)
class ScoreOutputs:
    """The paths of one scoring's files."""

    out: Path
    summary: Path
    unreadable: Path
    html: Path | None


def score_outputs(out: Path, html: Path | None) -> ScoreOutputs:
    """The files a scoring with ``--out out`` and ``--html html`` writes; ConfigError (one line, nothing written)
    when one of them cannot or must not be written."""
    outputs = ScoreOutputs(out, out.with_suffix(".json"), out.with_suffix(".unreadable.txt"), html)
    named = {"--out": out, "--out's summary": outputs.summary, "--out's list of unreadable files": outputs.unreadable}
    for what, path in [*named.items(), *([("--html", html)] if html is not None else [])]:
        problem = output_path_problem(path)
        if problem is not None:
            raise ConfigError(f"{what} {path}: {problem}; choose another path")
    if html is not None:
        for what, path in named.items():
            if html.resolve() == path.resolve():
                raise ConfigError(f"--html {html} is the same file as {what}; give the contact sheet another name")
    refuse_foreign_side_file(
        out, outputs.summary, "summary", "a `probcl score` summary", lambda content: SUMMARY_KEYS <= content.keys()
    )
    return outputs
