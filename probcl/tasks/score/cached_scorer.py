"""Scoring a run from its cache alone (:class:`CachedScorer`): the fitted reference plus the exported scoring
network (:mod:`probcl.eval.scoring_network`), so that a repeat call on the CPU imports neither the method
classes nor PyTorch Lightning."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import yaml

from probcl.core.io import file_identity
from probcl.core.layout import RunPaths, find_checkpoint
from probcl.data.loaders import image_batches, load_dataset
from probcl.data.sources import ImageSource
from probcl.data.specs import Split
from probcl.eval.score_table import with_input_statistics
from probcl.eval.scoring_network import ExportedOutputs, load_outputs
from probcl.runtime.devices import resolve_device
from probcl.tasks.score.cache import cache_file, read_cache
from probcl.tasks.score.options import ScoreOptions
from probcl.tasks.score.scorer import Batch, Scorer


class CachedScorer(Scorer):
    """Scores a run from its cache alone: the fitted reference plus the exported scoring network. Needs
    neither the method classes nor PyTorch Lightning; :meth:`open` says whether the cache allows it."""

    def __init__(self, run: Path, options: ScoreOptions, state: dict[str, Any], network: ExportedOutputs) -> None:
        super().__init__(run, options)
        self.state, self.network, self.input = state, network, state["input"]

    @classmethod
    def open(cls, run: str | Path, options: ScoreOptions) -> CachedScorer | None:
        """The cached scorer of ``run`` for ``options``; None when the model is needed: no cache or network
        for this checkpoint and options, caching off, a non-CPU device, or a run without its config."""
        run = Path(run)
        config = RunPaths(run).config
        if not options.cache or not run.is_dir() or not config.exists() or resolve_device(options.device).type != "cpu":
            return None
        try:
            dataset = yaml.safe_load(config.read_text())["data"]["dataset"]
            identity = file_identity(find_checkpoint(run))
        except Exception:  # noqa: BLE001 - whatever is wrong, the model path reports it properly
            return None
        path = cache_file(run, dataset, options)
        state = read_cache(path, identity)
        if state is None or not state.get("network"):
            return None
        network_file = path.parent / state["network"]["file"]
        try:
            network = load_outputs(network_file, list(state["network"]["outputs"]))
        except Exception:  # noqa: BLE001 - a damaged export: removed, so that the model path exports it again
            network_file.unlink(missing_ok=True)
            return None
        scorer = cls(run, options, state, network)
        scorer.cache = {"path": str(path), "hit": True, "network": str(network_file)}
        return scorer

    def dataset(self, spec: str | None, split: Split) -> ImageSource:
        i = self.input
        root = self.options.data_root or i["root"]
        return load_dataset(
            spec or i["dataset"],
            split,
            root,
            i["download"],
            i["image_size"],
            i["channels"],
            skip_corrupt=True,
            unreadable=self.unreadable,
        )

    def batches(self, data: ImageSource, description: str) -> Iterator[Batch]:
        return image_batches(data, self.options.batch_size, self.options.num_workers, description)

    def prepare(self) -> None:
        online = (lambda out: out["probe_logits"]) if "probe_logits" in self.network.names else None
        self.use_state(self.state, online)
        self.check_requested(self.reference.score_names)

    def model_outputs(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        return with_input_statistics(self.network(images), images)
