"""Evaluation suites registered by name, and the context they share.

A suite is a function ``(ctx: EvalContext, **options) -> dict`` whose result records
its protocol next to the numbers. The context loads the run's model once and caches
features of the train/test splits, so that several suites reuse them. Suites only use
the model's public API (``embed``, ``project``, ``uncertainty``, ``online_probe``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from probcl.config import parse_override_value
from probcl.errors import ConfigError
from probcl.data.datasets import TensorImages, load_dataset, random_subset
from probcl.eval.features import extract, pixel_features
from probcl.eval.knn import plain_knn_predict, topk_accuracy, weighted_knn_scores
from probcl.eval.linear import LinearProbe, linear_probe
from probcl.core.registry import Registry
from probcl.core.runs import RunPaths, load, resolve_device

Suite = Callable[..., dict]
SUITES: Registry[Suite] = Registry("evaluation suite")
FEATURE_LAYERS = ("backbone", "projection", "pixels")


@dataclass
class EvalContext:
    """One run's model, its data splits and cached features, shared by the suites of one evaluation."""

    run_dir: Path
    device: str = "auto"
    batch_size: int = 512
    feature_layer: str = "backbone"
    max_train: Optional[int] = None  # cap on training images used by probes/kNN (seeded subset)
    data_root: Optional[str] = None
    seed: int = 0
    _features: dict = field(default_factory=dict)

    @cached_property
    def model(self):
        return load(self.run_dir, device=self.device)

    @cached_property
    def paths(self) -> RunPaths:
        return RunPaths(Path(self.run_dir))

    @property
    def torch_device(self) -> torch.device:
        return resolve_device(self.device)

    def dataset(self, spec: Optional[str] = None, split: str = "test"):
        """A dataset conformed to the model's input (channels, size); defaults to the training dataset."""
        info = self.model.data_info
        cfg = self.model.cfg.data
        spec = spec or cfg.dataset
        root = self.data_root or cfg.root
        data = load_dataset(spec, split, root, cfg.download, info.image_size, info.channels)
        if split == "train" and self.max_train is not None and len(data) > self.max_train and isinstance(data, TensorImages):
            data = data.subset(random_subset(len(data), self.max_train, self.seed))
        return data

    @cached_property
    def num_classes(self) -> int:
        classes = self.model.data_info.num_classes
        if not classes:
            raise ValueError(f"{self.run_dir} was trained on unlabeled data: label-based suites need labels")
        return classes

    def embed_fn(self, layer: Optional[str] = None) -> Callable[[torch.Tensor], torch.Tensor]:
        layer = layer or self.feature_layer
        if layer not in FEATURE_LAYERS:
            raise ValueError(f"unknown feature layer {layer!r}; valid: {', '.join(FEATURE_LAYERS)}")
        return {"backbone": self.model.embed, "projection": self.model.project, "pixels": pixel_features}[layer]

    def features(self, split: str, spec: Optional[str] = None, layer: Optional[str] = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """Cached (features, labels) of a split of ``spec`` (default: the training dataset)."""
        layer = layer or self.feature_layer
        key = (spec, split, layer)
        if key not in self._features:
            data = self.dataset(spec, split)
            self._features[key] = extract(self.embed_fn(layer), data, self.batch_size, self.torch_device,
                                          f"{layer} features: {data.name} {split}")
        return self._features[key]

    def protocol(self, **extra: Any) -> dict:
        return {"feature_layer": self.feature_layer, "train_images": len(self.features("train")[0]), **extra}

    def linear_probe(self) -> tuple[dict, LinearProbe]:
        """The fitted offline linear probe on the current feature layer (fitted once, then cached)."""
        key = ("probe", self.feature_layer)
        if key not in self._features:
            train_f, train_y = self.features("train")
            test_f, test_y = self.features("test")
            self._features[key] = linear_probe(train_f, train_y, test_f, test_y, self.num_classes, seed=self.seed)
        return self._features[key]


@SUITES.register("linear")
def linear_suite(ctx: EvalContext) -> dict:
    """Offline linear probe: top-1/top-5 test accuracy (%)."""
    result, _ = ctx.linear_probe()
    result["protocol"].update(ctx.protocol())
    return result


@SUITES.register("knn")
def knn_suite(ctx: EvalContext, k: int = 200, temperature: float = 0.1, plain_k: int = 20) -> dict:
    """Weighted kNN (cosine, exp(sim/T) votes) and plain kNN (Euclidean majority), test accuracy (%)."""
    train_f, train_y = ctx.features("train")
    test_f, test_y = ctx.features("test")
    weighted = topk_accuracy(weighted_knn_scores(train_f, train_y, test_f, ctx.num_classes, k, temperature), test_y)
    plain = 100.0 * (plain_knn_predict(train_f, train_y, test_f, ctx.num_classes, plain_k) == test_y).float().mean().item()
    return {
        "top1": weighted["top1"], "top5": weighted.get("top5"), "plain_top1": plain,
        "protocol": ctx.protocol(weighted=f"k={k}, T={temperature}, cosine, exp(sim/T) votes (InstDisc)",
                                 plain=f"k={plain_k}, Euclidean, majority vote", best_epoch_picked=False),
    }


def parse_suite_options(items: list[str]) -> dict[str, dict]:
    """``["ood.datasets=digits,mnist", "knn.k=20"]`` -> {"ood": {"datasets": [...]}, "knn": {"k": 20}}."""
    options: dict[str, dict] = {}
    for item in items:
        key, sep, value = item.partition("=")
        suite, dot, name = key.partition(".")
        if not sep or not dot:
            raise ConfigError(f"suite option {item!r} must look like SUITE.KEY=VALUE")
        parsed = parse_override_value(value)
        if isinstance(parsed, str) and "," in parsed:
            parsed = [v for v in parsed.split(",") if v]
        options.setdefault(suite, {})[name] = parsed
    return options
