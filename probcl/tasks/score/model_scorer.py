"""Scoring with the run's model (:class:`ModelScorer`): fits the ID reference or reads it from the cache, and
exports the model's scoring outputs for :class:`~probcl.tasks.score.cached_scorer.CachedScorer`.

Loads the method classes and PyTorch Lightning; :func:`~probcl.tasks.score.scoring.score_dataset` imports this
module only when the cache cannot serve a call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from probcl.core.io import file_identity
from probcl.core.layout import find_checkpoint
from probcl.data.sources import ImageSource
from probcl.data.specs import Split
from probcl.errors import DatasetError
from probcl.eval.context import ModelOnData
from probcl.eval.id_reference import IdReference, ReferenceOptions, fit_reference
from probcl.eval.scoring_network import export_outputs
from probcl.tasks.score.cache import cache_file, read_cache, write_cache
from probcl.tasks.score.options import ScoreOptions
from probcl.tasks.score.probe import fit_probe
from probcl.tasks.score.scorer import Batch, ProbeFn, Scorer

EXPORT_SAMPLE = 8  # test images the scoring network is traced with


class ModelScorer(Scorer):
    """Scores with the run's model: fits the reference (or reads it from the cache) and exports the model's
    scoring outputs for the cached scorer."""

    def __init__(self, run: str | Path, options: ScoreOptions) -> None:
        super().__init__(run, options)
        self.ctx = ModelOnData(
            self.run,
            options.device,
            options.batch_size,
            max_train=options.max_train,
            data_root=options.data_root,
            seed=options.seed,
            num_workers=options.num_workers,
            unreadable=self.unreadable,
        )
        self.model = self.ctx.model
        self.check_requested()  # before any fitting: names the registry knows

    def dataset(self, spec: str | None, split: Split) -> ImageSource:
        # every image of the scored data (max_train caps what the reference is fitted on, not what is scored)
        return self.ctx.dataset(spec, split, skip_corrupt=True, cap_train=False)

    def batches(self, data: ImageSource, description: str) -> Iterator[Batch]:
        return self.ctx.batches(data, description)

    @property
    def cache_path(self) -> Path:
        return cache_file(self.run, self.model.cfg.data.dataset, self.options)

    def prepare(self) -> None:
        """The ID reference, probe and protocol: from the cache when it holds them for this checkpoint."""
        identity = file_identity(find_checkpoint(self.run))
        path = self.cache_path
        state = read_cache(path, identity) if self.options.cache else None
        self.cache = {"path": str(path), "hit": state is not None}
        fresh = state is None
        if state is None:
            state = {**self._fit(), "checkpoint": identity, "options": self.options.cache_fields()}
        reference = IdReference.from_state(state["reference"])  # the exported outputs depend on it
        if self.options.cache and (fresh or self._network_missing(path, state)):
            state.update(self._export(state, reference))
            not_stored = write_cache(path, state)
            if not_stored is not None:
                self.cache["not_stored"] = not_stored
        self.use_state(state, self._online_logits(), reference)
        self.check_requested(reference.score_names)

    def model_outputs(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.reference.outputs(self.ctx, images)

    def _online_logits(self) -> ProbeFn | None:
        """Model outputs -> the online probe's logits on the CPU (None: the run has no online probe)."""
        online, device = self.model.online_probe, self.ctx.torch_device
        if online is None:
            return None
        return torch.no_grad()(lambda out: online(out["features"].to(device)).cpu())

    @staticmethod
    def _network_missing(path: Path, state: dict[str, Any]) -> bool:
        """A cache without a network entry (older versions) or whose exported file is gone: export again.
        (An entry of None records a model that could not be exported: not retried.)"""
        if "network" not in state:
            return True
        return bool(state["network"]) and not (path.parent / state["network"]["file"]).exists()

    def _export(self, state: dict[str, Any], reference: IdReference) -> dict[str, Any]:
        """The cache's network entry: the exported outputs (CPU models only), the data they expect, and the
        checkpoint's description; a model that does not export keeps the model path (and says why)."""
        cfg, info = self.model.cfg, self.model.data_info
        entry: dict[str, Any] = {
            "input": {
                "dataset": info.dataset,
                "image_size": info.image_size,
                "channels": info.channels,
                "root": cfg.data.root,
                "download": cfg.data.download,
            },
            "checkpoint_meta": json.loads(json.dumps(self.model.checkpoint_meta, default=str)),
            "network": None,
        }
        if self.ctx.torch_device.type != "cpu":
            entry["network_error"] = "exported on CPU runs only"
            return entry
        fns = reference.model_output_fns(self.ctx)
        if self.model.online_probe is not None:
            embed, online = fns["features"], self.model.online_probe
            fns["probe_logits"] = lambda x: online(embed(x))
        path = cache_file(self.run, cfg.data.dataset, self.options, "network", ".pt2")
        try:
            images = self._export_sample()
            entry["network"] = {"file": path.name, "outputs": export_outputs(self.model, fns, images, path)}
        except Exception as e:  # noqa: BLE001 - any model that torch.export cannot handle is scored eagerly
            entry["network_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return entry

    def _export_sample(self) -> torch.Tensor:
        """A few readable test images to trace the scoring network with."""
        test = self.ctx.dataset(None, "test")
        sample = test.seeded_subset(min(EXPORT_SAMPLE, len(test)), 0)
        images = next(iter(self.ctx.batches(sample, "exporting the scoring network")))[0]
        if images is None:
            raise DatasetError("no readable test image to trace the network with")
        return images

    def _fit(self) -> dict[str, Any]:
        """Fit the probe (its head feeds the classifier-head scores) and the reference on the training split,
        calibrate the reference on the test split."""
        o = self.options
        held_out = self.ctx.dataset(None, "test").seeded_subset(o.max_calibration, o.seed)
        probe = fit_probe(o.probe, self.model, *self.ctx.features("train"), o.seed)
        options = ReferenceOptions(o.knn_k, o.tpr, o.combination, o.seed)
        reference, id_out = fit_reference(self.ctx, held_out, options, probe.head)
        protocol = {
            **reference.protocol(),
            "fit": f"{reference.fit_size} images of {self.model.cfg.data.dataset} (train split)",
            "held_out": f"{len(held_out)} images of {held_out.name} (test split)",
            **probe.protocol(id_out),
            "class_names": self.model.data_info.class_names,  # predicted_class names these (None: numbered)
        }
        return {"reference": reference.state(), "probe": probe.state, "protocol": protocol}
