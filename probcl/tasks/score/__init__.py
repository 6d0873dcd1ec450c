"""Per-image scores of a trained run: predicted class, every OOD score with its tail probability, the
combined score, the OOD flag and why an image was flagged.

:func:`score_dataset` streams a dataset or folder through the model in batches (unreadable files are
reported, with the reason, and skipped) and writes one row per readable image to CSV or Parquet as it goes,
plus a ``.json`` sidecar with the protocol and thresholds and, on request, an HTML contact sheet of every
flagged image and the most and least typical accepted ones.

The scores and thresholds are those of :mod:`probcl.eval.id_reference` (the ``ood`` suite's): fitted on the
run's training images, calibrated on its test split, needing no OOD example. The default decision is the
combined score, -log of the smallest weighted tail probability p / w of the combination's scores under the
training distribution (distances weighted above guards, see
:func:`~probcl.eval.score_table.combination_weights`), thresholded at T to accept 95 % of in-distribution
images; ``flagged_by`` names every score whose own p / w crossed that level, i.e. whose tail probability is
below its own threshold w exp(-T) (``ScoreSummary.tail_thresholds``, printed per score). Any single score
can decide instead (``score``).

The fitted reference is cached in ``RUN/score-cache/`` for the checkpoint it was fitted on and the options
that shape it (:mod:`.cache`), so repeat calls only score the new images; with it goes the model's scoring
outputs exported as one ``torch.export`` program, so that a repeat call on the CPU (:mod:`.cached_scorer`)
imports neither the method classes nor PyTorch Lightning (:mod:`.model_scorer` does).

Modules: :mod:`.options` (``ScoreOptions``), :mod:`.cache`, :mod:`.scorer` (the columns of a batch),
:mod:`.model_scorer`, :mod:`.cached_scorer`, :mod:`.probe`, :mod:`.sinks` (CSV/Parquet), :mod:`.extremes`
(the contact sheet's bounded heaps), :mod:`.sheet` (sidecar and contact sheet), :mod:`.scoring`
(``score_dataset``).
"""

from probcl.tasks.score.options import ScoreOptions
from probcl.tasks.score.scoring import score_dataset
from probcl.tasks.score.sheet import ScoreSummary

__all__ = ["ScoreOptions", "ScoreSummary", "score_dataset"]
