"""OOD scores in one home: the registry (:mod:`.registry`, :data:`SCORES`), its entries (:mod:`.entries`), the
statistics they fit (:mod:`.statistics`), the linear head's detectors (:mod:`.head`) and the tail probabilities
that calibrate and combine them (:mod:`.tails`).

Importing the package registers every built-in score. Every score is an outlier score (higher = more
out-of-distribution) fitted on in-distribution data alone; none needs OOD examples.
"""

from probcl.eval.ood_scores import entries as _entries  # noqa: F401 - registers the built-in scores
from probcl.eval.ood_scores.registry import SCORES, FitData, OodScore, ScoreBatch
from probcl.eval.ood_scores.statistics import Gaussian, fit_gaussian, input_statistics
from probcl.eval.ood_scores.tails import TailCombiner, tail_size

__all__ = [
    "SCORES",
    "FitData",
    "Gaussian",
    "OodScore",
    "ScoreBatch",
    "TailCombiner",
    "fit_gaussian",
    "input_statistics",
    "tail_size",
]
