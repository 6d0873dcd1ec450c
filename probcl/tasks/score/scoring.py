"""``score_dataset``: one pass of a scorer over a dataset or folder, writing a row per readable image to
CSV or Parquet as it goes, then the sidecar and, on request, the contact sheet."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import IO, Any

import torch

from probcl.core.io import atomic_write
from probcl.data.decoding import CorruptImageError, decode_image
from probcl.data.sources import ImageSource
from probcl.errors import DatasetError
from probcl.eval.ood_scores.calibration import COMBINED
from probcl.tasks.score.cached_scorer import CachedScorer
from probcl.tasks.score.extremes import SheetPicks
from probcl.tasks.score.options import ScoreOptions
from probcl.tasks.score.outputs import score_outputs
from probcl.tasks.score.scorer import Scorer
from probcl.tasks.score.sheet import ScoreSummary, write_contact_sheet, write_sidecar
from probcl.tasks.score.sinks import open_sink, output_format


def unreadable_reason(path: str) -> str:
    """Why the image file ``path`` could not be decoded: the decoder's message, without the path."""
    try:
        decode_image(Path(path), 1, 1)
    except CorruptImageError as e:
        return str(e).removeprefix(f"cannot read image {path}: ")
    return "could not be decoded when scored"


class ScoringPass:
    """The rows of one dataset written to a sink, with what they held: counts, flags, skipped files and the
    contact sheet's picks (``picks`` None: no sheet)."""

    def __init__(self, scorer: Scorer, dataset: ImageSource, fmt: str, picks: SheetPicks | None) -> None:
        self.scorer, self.dataset, self.fmt, self.picks = scorer, dataset, fmt, picks
        self.rows = 0
        self.flagged = 0
        self.flagged_by: Counter[str] = Counter()
        self.skipped = scorer.unreadable.found  # unreadable file -> why: the up-front check's and the decoder's

    def write(self, fh: IO[bytes]) -> None:
        """Score every batch into ``fh``; one DatasetError when no image could be read."""
        sink = open_sink(self.fmt, fh)
        for images, labels, indices, skipped in self.scorer.batches(self.dataset, f"scoring {self.dataset.name}"):
            for i in skipped.tolist():
                path = self.dataset.item_id(i)
                self.scorer.unreadable.add(path, unreadable_reason(path))
            if images is not None:
                sink.write(self._batch(images, labels, indices))
        if self.rows == 0:
            raise DatasetError(f"{self.dataset.name}: none of its {len(self.skipped)} images could be read")
        sink.close()

    def _batch(self, images: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor) -> dict[str, list]:
        cols, ranks = self.scorer.columns(self.dataset, images, labels, indices)
        self.flagged_by.update(name for names in cols["flagged_by"] for name in names.split(";") if name)
        if self.picks is not None:
            self.picks.add(images, cols, ranks["rank"], ranks["tiebreak"])
        self.rows += len(indices)
        self.flagged += sum(cols["ood"])
        return cols


def open_scorer(run: str | Path, options: ScoreOptions) -> Scorer:
    """The cached scorer when the cache serves ``options``, else the run's model."""
    cached = CachedScorer.open(run, options)
    if cached is not None:
        return cached
    # the model path loads the method classes and Lightning: imported only when needed (a repeat call's speed)
    from probcl.tasks.score.model_scorer import ModelScorer

    return ModelScorer(run, options)


def decision_protocol(scorer: Scorer, options: ScoreOptions) -> dict[str, Any]:
    """The scorer's protocol plus how this call decided (score, TPR, split, batch size)."""
    reference = scorer.reference
    return {
        **scorer.protocol,
        "score": options.score,
        "tpr": options.tpr,
        "decision": (
            f"flag when -log p > threshold, p = the tail probability of {options.score}"
            if options.score != COMBINED
            else f"flag when the combined score (-log min p / w over {', '.join(reference.combination)}) "
            f"> threshold; flagged_by lists every score whose own -log (p / w) crossed it"
        ),
        "split": options.split,
        "batch_size": options.batch_size,
    }


def score_dataset(
    run: str | Path,
    data: str,
    out: str | Path | None = None,
    options: ScoreOptions | None = None,
    html: str | Path | None = None,
) -> ScoreSummary:
    """Score every readable image of ``data`` (dataset spec or ``folder:PATH``) with the model of ``run``.

    Writes ``out`` (default ``RUN/scores.csv``) atomically, a ``.json`` sidecar next to it, and an HTML
    contact sheet to ``html`` when given.
    """
    options = (options or ScoreOptions()).validated()
    out = Path(out) if out is not None else Path(run) / "scores.csv"
    fmt = output_format(out)
    outputs = score_outputs(out, Path(html) if html is not None else None)
    scorer = open_scorer(run, options)
    dataset = scorer.dataset(data, options.split)  # fail on a bad spec before the reference passes
    scorer.prepare()
    picks = SheetPicks(options.sheet_size, options.sheet_flagged) if html is not None else None
    scored = ScoringPass(scorer, dataset, fmt, picks)
    atomic_write(out, scored.write)
    scorer.unreadable.report(outputs.unreadable)
    reference = scorer.reference
    summary = ScoreSummary(
        out=out,
        sidecar=outputs.summary,
        rows=scored.rows,
        skipped=scored.skipped,
        thresholds=dict(reference.thresholds),
        tail_thresholds=reference.tail_thresholds(options.score),
        score=options.score,
        tpr=options.tpr,
        combination=list(reference.combination),
        flagged=scored.flagged,
        flagged_by=dict(scored.flagged_by.most_common()),
        cache=scorer.cache,
        html=outputs.html,
        protocol=decision_protocol(scorer, options),
        notes=reference.notes,
    )
    write_sidecar(summary, run, data, scorer.checkpoint_meta)
    if picks is not None:
        write_contact_sheet(summary, picks, run, data)
    return summary
