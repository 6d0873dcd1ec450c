"""One trained model on data: the layer that the evaluation suites and ``probcl score`` share.

:class:`ModelOnData` loads a run's model once, conforms datasets to its input (channels,
size; the training split capped to a seeded ``max_train`` subset), runs batches through the
model's public API (``embed``, ``project`` and, for :class:`HasUncertainty` methods,
``uncertainty``) and caches features and the offline linear probe for reuse.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from probcl.core.progress import progress
from probcl.core.runs import RunPaths, load, resolve_device
from probcl.data.datasets import ImageSource, Split, collate_skip_corrupt, load_dataset
from probcl.errors import ConfigError, DatasetError
from probcl.eval.features import extract, pixel_features
from probcl.eval.linear import LinearProbe, linear_probe
from probcl.methods.base import SSLMethod
from probcl.methods.capabilities import HasUncertainty

FEATURE_LAYERS = ("backbone", "projection", "pixels")


@dataclass
class ModelOnData:
    """A run's model, the data conformed to it, batched outputs and cached features."""

    run_dir: Path
    device: str = "auto"
    batch_size: int = 512
    feature_layer: str = "backbone"
    max_train: int | None = None  # cap on training images (seeded subset) for probes, kNN and references
    data_root: str | None = None
    seed: int = 0  # seed of the max_train subset and of the offline probe
    num_workers: int = 0  # image-decoding processes for folder datasets
    _cache: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir)
        if self.feature_layer not in FEATURE_LAYERS:
            raise ConfigError(f"unknown feature layer {self.feature_layer!r}; valid: {', '.join(FEATURE_LAYERS)}")
        if self.batch_size < 1:
            raise ConfigError(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.max_train is not None and self.max_train < 1:
            raise ConfigError(f"--max-train must be >= 1, got {self.max_train}")

    def for_run(self, run_dir: str | Path) -> ModelOnData:
        """The same settings on another run (ensemble members, reference runs), with its own cache."""
        return dataclasses.replace(self, run_dir=Path(run_dir))

    @cached_property
    def model(self) -> SSLMethod:
        return load(self.run_dir, device=self.device)

    @cached_property
    def paths(self) -> RunPaths:
        return RunPaths(self.run_dir)

    @property
    def torch_device(self) -> torch.device:
        return resolve_device(self.device)

    @property
    def method(self) -> str:
        return self.model.cfg.method

    # ----------------------------------------------------------------- data
    def dataset(self, spec: str | None = None, split: Split = "test", skip_corrupt: bool = False,
                cap_train: bool = True) -> ImageSource:
        """``spec`` (default: the training dataset) conformed to the model's input; a train split is the
        seeded ``max_train`` subset unless ``cap_train`` is off. ``skip_corrupt``: unreadable files yield
        None (see :meth:`batches`)."""
        info, cfg = self.model.data_info, self.model.cfg.data
        data = load_dataset(spec or cfg.dataset, split, self.data_root or cfg.root, cfg.download, info.image_size,
                            info.channels, skip_corrupt=skip_corrupt)
        if split == "train" and cap_train:
            data = data.seeded_subset(self.max_train, self.seed)
        return data

    @cached_property
    def num_classes(self) -> int:
        classes = self.model.data_info.num_classes
        if not classes:
            raise DatasetError(f"{self.run_dir} was trained on unlabeled data: label-based suites need labels")
        return classes

    def batches(self, data: ImageSource, description: str
                ) -> Iterator[tuple[torch.Tensor | None, Any, Any, torch.Tensor]]:
        """(uint8 images, labels, indices, skipped indices) per batch; unreadable images are skipped."""
        loader = DataLoader(data, batch_size=self.batch_size, shuffle=False, num_workers=self.num_workers,
                            collate_fn=collate_skip_corrupt)
        yield from progress(loader, description)

    # ----------------------------------------------------------------- model outputs
    def embed_fn(self, layer: str | None = None) -> Callable[[torch.Tensor], torch.Tensor]:
        """uint8 images -> features of ``layer`` (default: the context's feature layer)."""
        layer = layer or self.feature_layer
        if layer not in FEATURE_LAYERS:
            raise ConfigError(f"unknown feature layer {layer!r}; valid: {', '.join(FEATURE_LAYERS)}")
        return {"backbone": self.model.embed, "projection": self.model.project, "pixels": pixel_features}[layer]

    @torch.no_grad()
    def outputs(self, images: torch.Tensor, uncertainty_score: str | None = None) -> dict[str, torch.Tensor]:
        """Backbone features, L2-normalized projection and, for :class:`HasUncertainty` methods, the
        ``uncertainty_score`` (default: the method's first) of a batch, on CPU."""
        images = images.to(self.torch_device)
        out = {"features": self.model.embed(images).float(),
               "projection": F.normalize(self.model.project(images).float(), dim=1)}
        if isinstance(self.model, HasUncertainty):
            out["uncertainty"] = self.model.uncertainty(images, score=uncertainty_score).float()
        return {k: v.cpu() for k, v in out.items()}

    def collect(self, data: ImageSource, description: str, uncertainty_score: str | None = None
                ) -> dict[str, torch.Tensor]:
        """:meth:`outputs` and labels of every readable image of ``data``."""
        parts: dict[str, list[torch.Tensor]] = {}
        for images, labels, _, _ in self.batches(data, description):
            if images is None:
                continue
            for key, value in {**self.outputs(images, uncertainty_score), "labels": labels}.items():
                parts.setdefault(key, []).append(value)
        if not parts:
            raise DatasetError(f"{data.name}: no readable images")
        return {k: torch.cat(v) for k, v in parts.items()}

    def features(self, split: Split, spec: str | None = None, layer: str | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """Cached (features, labels) of a split of ``spec`` (default: the training dataset)."""
        layer = layer or self.feature_layer
        key = ("features", spec, split, layer)
        if key not in self._cache:
            data = self.dataset(spec, split)
            self._cache[key] = self.extract(data, f"{layer} features: {data.name} {split}", layer)
        return self._cache[key]

    def extract(self, data: ImageSource, description: str, layer: str | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Uncached (features, labels) of any dataset (default: the context's feature layer)."""
        return extract(self.embed_fn(layer), data, self.batch_size, self.torch_device, description, self.num_workers)

    def linear_probe(self) -> tuple[dict, LinearProbe]:
        """The offline linear probe on the feature layer's train/test features (fitted once, then cached)."""
        key = ("probe", self.feature_layer)
        if key not in self._cache:
            train_f, train_y = self.features("train")
            test_f, test_y = self.features("test")
            self._cache[key] = linear_probe(train_f, train_y, test_f, test_y, self.num_classes, seed=self.seed)
        return self._cache[key]

    def protocol(self, **extra: Any) -> dict:
        """What every suite result records about its inputs, plus ``extra``."""
        return {"feature_layer": self.feature_layer, "train_images": len(self.features("train")[0]), **extra}
