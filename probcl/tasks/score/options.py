"""`probcl score`'s options: which score decides, how the ID reference is fitted, what the contact sheet shows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from probcl.config import (
    INFERENCE_BATCH_SIZE,
    MAX_SEED,
    AtLeast,
    InRange,
    NonNegative,
    OneOf,
    OnUnreadable,
    from_dict,
    to_plain,
)
from probcl.eval.ood_scores.calibration import COMBINED
from probcl.eval.ood_scores.registry import COMBINATION_KNN_K
from probcl.eval.outlier import DEFAULT_TPR

PROBE_SOURCES = ("online", "offline", "none")  # where class predictions come from
ScoredSplit = Literal["all", "train", "test"]  # split of the scored data


@dataclass
class ScoreOptions:
    """How to score; the defaults: the combined ID-fitted score, a threshold accepting 95 % of ID images.

    Bounds are declared on the fields and checked by :meth:`validated` (``probcl.config.from_dict``)."""

    score: str = COMBINED  # the deciding score: combined, or one score's tail probability (e.g. knn10)
    combination: list[str] | None = None  # scores of the combined score (None: the default combination)
    knn_k: Annotated[int, AtLeast(1)] = COMBINATION_KNN_K  # neighbours of the combination's kNN distance (raw features)
    tpr: Annotated[float, InRange(0, 1, low_open=True)] = DEFAULT_TPR  # share of ID images every threshold accepts
    probe: Annotated[str, OneOf(PROBE_SOURCES)] = "online"  # class predictions: the online probe, an offline one, none
    split: ScoredSplit = "all"  # split of the scored dataset
    batch_size: Annotated[int, AtLeast(1)] = INFERENCE_BATCH_SIZE  # the inference batch: images per forward pass
    max_train: Annotated[int | None, AtLeast(1)] = None  # seeded subset of training images the scores are fitted on
    # seeded subset of test images the tails and thresholds come from (halved: tails, thresholds)
    max_calibration: Annotated[int | None, AtLeast(2)] = None
    seed: Annotated[int, InRange(0, MAX_SEED)] = 0  # seed of the subsets, the calibration halves, the offline probe
    device: str = "auto"  # auto (CUDA when present), cpu, cuda, cuda:1, ...
    data_root: str | None = None  # default: the run's data.root, $PROBCL_DATA
    num_workers: Annotated[int, NonNegative] = 0  # image-decoding processes for folder datasets
    cache: bool = True  # reuse / store the fitted reference in RUN/score-cache
    sheet_size: Annotated[int, AtLeast(1)] = 16  # accepted images per section of the HTML contact sheet
    # flagged images the contact sheet shows (the most unusual first); it names the file listing the rest
    sheet_flagged: Annotated[int, NonNegative] = 100
    on_unreadable: OnUnreadable = "skip"  # image files that cannot be read: skip (listed in OUT.unreadable.txt) | error

    def validated(self, names: Mapping[str, str] | None = None) -> ScoreOptions:
        """These options checked against the field bounds: one ConfigError naming the option otherwise
        (``score.FIELD``, or ``names[FIELD]``: the command's flag)."""
        return from_dict(ScoreOptions, to_plain(self), "score", names=names)

    def cache_fields(self) -> dict[str, Any]:
        """The options that shape the fitted reference and probe (the cache key)."""
        return {
            "knn_k": self.knn_k,
            "tpr": self.tpr,
            "combination": self.combination,
            "probe": self.probe,
            "max_train": self.max_train,
            "max_calibration": self.max_calibration,
            "seed": self.seed,
            "data_root": self.data_root,
        }
