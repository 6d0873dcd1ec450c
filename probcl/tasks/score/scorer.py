"""What every scorer does: a run's ID reference and class probe plus a way to get the model's outputs, turning
image batches into the output columns (:class:`Scorer`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from probcl.data.sources import ImageSource
from probcl.data.specs import Split
from probcl.data.unreadable import ON_UNREADABLE_OPTION, UnreadableFiles
from probcl.errors import ConfigError
from probcl.eval.id_reference import IdReference
from probcl.eval.linear import LinearProbe
from probcl.eval.ood_scores import SCORES
from probcl.eval.ood_scores.calibration import COMBINED
from probcl.eval.score_table import check_names
from probcl.tasks.score.options import ScoreOptions

Batch = tuple[Any, Any, Any, torch.Tensor]  # uint8 images or None, labels, indices, skipped indices
ProbeFn = Callable[[dict[str, torch.Tensor]], torch.Tensor]  # model outputs -> class logits


class Scorer(ABC):
    """A run's ID reference and class probe (see :meth:`prepare`) plus a way to get the model's outputs:
    turns image batches into score columns."""

    def __init__(self, run: str | Path, options: ScoreOptions) -> None:
        self.options = options
        self.run = Path(run)
        self._reference: IdReference | None = None
        self.probe: ProbeFn | None = None
        self.protocol: dict[str, Any] = {}
        self.cache: dict[str, Any] = {}
        self.checkpoint_meta: Any = None
        self.unreadable = UnreadableFiles(options.on_unreadable, ON_UNREADABLE_OPTION)  # of every data it reads

    @abstractmethod
    def dataset(self, spec: str | None, split: Split) -> ImageSource:
        """``spec`` (default: the run's training data) conformed to the model's input, unreadable files skipped."""

    @abstractmethod
    def batches(self, data: ImageSource, description: str) -> Iterator[Batch]:
        """(uint8 images or None, labels, indices, skipped indices) per batch, with a progress bar."""

    @abstractmethod
    def prepare(self) -> None:
        """Set :attr:`reference`, :attr:`probe`, :attr:`protocol`, :attr:`cache` and :attr:`checkpoint_meta`
        (through :meth:`use_state`)."""

    @abstractmethod
    def model_outputs(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        """What the reference scores (and the probe) need of a uint8 batch, float32 on the CPU."""

    @property
    def reference(self) -> IdReference:
        """The fitted, calibrated ID reference (after :meth:`prepare`)."""
        if self._reference is None:
            raise ConfigError("Scorer.prepare() has not run")
        return self._reference

    def check_requested(self, valid: list[str] | None = None) -> None:
        """One ConfigError when ``--score`` or ``--combination`` names a score not in ``valid`` (default: a score
        the registry does not know)."""
        choices = valid if valid is not None else SCORES.spellings()
        known = (lambda s: s in valid) if valid is not None else (lambda s: s in SCORES)
        if self.options.score != COMBINED and not known(self.options.score):
            check_names([self.options.score], choices, "for --score (or 'combined')")
        check_names([s for s in self.options.combination or [] if not known(s)], choices, "in --combination")

    def use_state(
        self, state: dict[str, Any], online_probe: ProbeFn | None, reference: IdReference | None = None
    ) -> None:
        """Reference (``reference`` when already built from ``state``), protocol and probe from a cached or
        freshly fitted state; ``online_probe`` maps model outputs to the online probe's logits (None: none)."""
        self._reference = reference or IdReference.from_state(state["reference"])
        self.protocol = state["protocol"]
        self.checkpoint_meta = state.get("checkpoint_meta")
        if self.options.probe == "online" and online_probe is not None:
            self.probe = online_probe
        elif state["probe"] is not None:
            logits = LinearProbe(**state["probe"]).logits
            self.probe = lambda out: logits(out["features"])

    def columns(
        self, dataset: ImageSource, images: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor
    ) -> tuple[dict[str, list], dict[str, torch.Tensor]]:
        """The output columns of one batch, and the tensors the contact sheet ranks by."""
        reference, score = self.reference, self.options.score
        outputs = self.model_outputs(images)
        scores = reference.scores(outputs)
        combined = reference.decision(scores)
        decision = combined if score == COMBINED else reference.decision(scores, score)
        flags, flagged_by = reference.flags(decision, score)
        cols: dict[str, list] = {"index": indices.tolist(), "id": [dataset.item_id(int(i)) for i in indices]}
        if dataset.labels() is not None:
            cols["label"] = labels.tolist()
        if self.probe is not None:
            confidence, predicted = self.probe(outputs).softmax(1).max(1)
            names = self.protocol.get("class_names")
            cols["predicted_class"] = [names[i] for i in predicted.tolist()] if names else predicted.tolist()
            cols["probe_confidence"] = confidence.tolist()
        for name in reference.score_names:
            cols[name] = scores[name].tolist()
            cols[f"p:{name}"] = combined[f"p:{name}"].tolist()
        cols[COMBINED] = combined["ood_score"].tolist()
        cols["ood"] = flags.tolist()
        cols["flagged_by"] = flagged_by
        cols["most_unusual"] = reference.most_unusual(combined)
        return cols, {"rank": decision["ood_score"], "tiebreak": combined["ood_score"]}
