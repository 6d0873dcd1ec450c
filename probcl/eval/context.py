"""One trained model on data: the layer that the evaluation suites and ``probcl score`` share.

:class:`ModelOnData` loads a run's model once (or takes a :class:`~probcl.models.encoder.ForeignEncoder`:
any encoder with its preprocessing, no run directory), conforms datasets to its input (channels,
size; the training split capped to a seeded ``max_train`` subset), runs batches through the
model's public API (``embed``, ``project`` and, for :class:`HasUncertainty` methods,
``uncertainty``) and caches features and the offline linear probe for reuse.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import torch
import torch.nn.functional as F

from probcl.config import INFERENCE_BATCH_SIZE, AtLeast, NonNegative, Seed, check_bounds
from probcl.core.io import file_identity
from probcl.core.layout import RunPaths
from probcl.core.names import FEATURE_LAYERS
from probcl.data.info import DataInfo
from probcl.data.loaders import image_batches, load_dataset
from probcl.data.sources import ImageSource
from probcl.data.specs import Split
from probcl.data.unreadable import ON_UNREADABLE_OPTION, UnreadableFiles
from probcl.errors import ConfigError, DatasetError
from probcl.eval import feature_cache
from probcl.eval.features import concat_batches, extract, pixel_features
from probcl.eval.linear import LinearProbe, linear_probe
from probcl.eval.linear_sgd import SGDProbeOptions, sgd_heldout_probe, sgd_linear_probe
from probcl.eval.provenance import encoder_record, evaluated_model
from probcl.methods.capabilities import HasUncertainty
from probcl.models.checkpoint import RunBackbone, RunCheckpoint, read_checkpoint
from probcl.models.encoder import ForeignEncoder
from probcl.models.inference import Inference
from probcl.runtime.devices import resolve_device
from probcl.runtime.precision import PrecisionChoice, compute_precision, resolve_precision

if TYPE_CHECKING:  # building a method imports PyTorch Lightning: only suites that need the method do
    from probcl.config import Config
    from probcl.methods.base import SSLMethod

# the offline linear probes: probcl's L-BFGS logistic regression, the papers' SGD one (lr 5 on raw features), and
# the SGD one in the paper's regime with its lr chosen on held-out training images (probcl.eval.linear_sgd)
LINEAR_PROBES = ("lbfgs", "sgd", "sgd-heldout")
T = TypeVar("T")


@dataclass
class ModelOnData:
    """A run's model (or a foreign encoder), the data conformed to it, batched outputs and cached features.

    Exactly one of ``run_dir`` and ``foreign`` is given; with ``foreign``, the data is the encoder's
    evaluation dataset and only embeddings exist (:attr:`model`, a run's method, is then an error).
    """

    run_dir: Path | None
    device: str = "auto"
    batch_size: Annotated[int, AtLeast(1)] = INFERENCE_BATCH_SIZE  # images per forward pass (the inference batch)
    feature_layer: str = "backbone"
    max_train: Annotated[int | None, AtLeast(1)] = None  # cap on training images (seeded subset) for probes, kNN, refs
    data_root: str | None = None
    seed: Seed = 0  # seed of the max_train subset and of the offline probe
    num_workers: Annotated[int, NonNegative] = 0  # image-decoding processes for folder datasets
    foreign: ForeignEncoder | None = None  # an encoder evaluated instead of a run's model
    notes: list[str] = field(default_factory=list, init=False, repr=False)  # what the user is told at the end
    # policy for unreadable image files, and those met (each folder checked once, whatever the splits loaded)
    unreadable: UnreadableFiles = field(default_factory=lambda: UnreadableFiles("skip", ON_UNREADABLE_OPTION))
    requested_precision: str | None = None  # None: the run's train.precision (auto for a foreign encoder)
    store_features: bool = True  # write computed features to RUN/feature-cache/ (read from it either way)
    _cache: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if (self.run_dir is None) == (self.foreign is None):
            raise ConfigError("ModelOnData takes a run directory or a foreign encoder (one of them)")
        self.run_dir = None if self.run_dir is None else Path(self.run_dir)
        check_bounds(self)  # built in code (by `probcl score`, benchmarks) as well as from checked settings
        self.check_layer(self.feature_layer)
        resolve_device(self.device)  # a device this machine lacks fails here, before any work

    def note(self, text: str) -> None:
        """Tell the user ``text`` once, after the evaluation (``probcl evaluate`` prints the notes; the Python API
        returns them)."""
        if text not in self.notes:
            self.notes.append(text)

    def cached(self, key: Hashable, make: Callable[[], T]) -> T:
        """``make()``, computed once per ``key`` for this model and these settings."""
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def for_run(self, run_dir: str | Path) -> ModelOnData:
        """The same settings on another run (ensemble members, reference runs), with its own cache."""
        return dataclasses.replace(self, run_dir=Path(run_dir), foreign=None)

    @cached_property
    def checkpoint(self) -> RunCheckpoint:
        """The run's checkpoint as read from disk (config, data statistics, weights, training position); a foreign
        encoder has none (one ConfigError)."""
        if self.run_dir is None:
            raise ConfigError(
                f"encoder {self.name} is not a probcl run: it has embeddings only (no projection "
                f"head, training curves, augmentations or method capabilities)"
            )
        return read_checkpoint(self.run_dir)

    @property
    def config(self) -> Config:
        """The run's config; a foreign encoder has none (one ConfigError)."""
        return self.checkpoint.config

    @cached_property
    def model(self) -> SSLMethod:
        """The run's method (built on first use: it imports PyTorch Lightning); a foreign encoder has none (one
        ConfigError)."""
        from probcl.runs.loading import method_of

        return method_of(self.checkpoint, self.device)

    @cached_property
    def encoder(self) -> SSLMethod | ForeignEncoder:
        """What embeds images: the run's method, or the foreign encoder (moved to the device, in eval mode,
        its input checked)."""
        if self.foreign is None:
            return self.model
        encoder = self.foreign.to(self.torch_device).eval()
        encoder.check_input()
        return encoder

    @cached_property
    def embedder(self) -> Inference:
        """What computes backbone features: the foreign encoder; for a run, its method once a suite has built it,
        else the run's backbone read from its checkpoint (the same features, bit for bit, without building the
        method: :class:`~probcl.models.checkpoint.RunBackbone`)."""
        if self.foreign is not None:
            return self.encoder
        if "model" in self.__dict__:
            return self.model
        return RunBackbone(self.checkpoint).to(self.torch_device).eval()

    @property
    def info(self) -> DataInfo:
        """The model's input: training dataset (or evaluation dataset), channels, size, classes, normalisation."""
        return self.checkpoint.data_info if self.foreign is None else self.encoder.data_info

    @property
    def name(self) -> str:
        """The run directory, or the foreign encoder's name."""
        return str(self.run_dir) if self.foreign is None else self.foreign.name

    @cached_property
    def checkpoint_meta(self) -> dict[str, Any]:
        """What was evaluated, as every result records it (:func:`~probcl.eval.provenance.evaluated_model`): the
        run's checkpoint (path, epoch, step) or the foreign encoder's source, the sha256 of its file (of the
        module's tensors when it has none) and the preprocessing."""
        if self.foreign is None:
            return evaluated_model(self.checkpoint.meta, self.checkpoint.data_info, self.checkpoint.path)
        return encoder_record(self.foreign)

    @cached_property
    def paths(self) -> RunPaths:
        if self.run_dir is None:
            raise ConfigError(f"encoder {self.name} has no run directory")
        return RunPaths(self.run_dir)

    @property
    def torch_device(self) -> torch.device:
        return resolve_device(self.device)

    @cached_property
    def precision(self) -> PrecisionChoice:
        """The precision features are extracted in: :attr:`requested_precision` when set, else the run's
        ``train.precision`` on this device (``auto``: bf16 on a CPU that computes it natively), as the model
        trained; ``auto`` for a foreign encoder."""
        requested = self.requested_precision or (self.config.train.precision if self.foreign is None else "auto")
        return resolve_precision(requested, self.torch_device)

    @property
    def method(self) -> str:
        """The run's method name, or the foreign encoder's name."""
        return self.config.method if self.foreign is None else self.foreign.name

    # ----------------------------------------------------------------- data
    def dataset(
        self, spec: str | None = None, split: Split = "test", skip_corrupt: bool = False, cap_train: bool = True
    ) -> ImageSource:
        """``spec`` (default: the training dataset) conformed to the model's input; a train split is the
        seeded ``max_train`` subset unless ``cap_train`` is off. ``skip_corrupt``: unreadable files yield
        None (see :meth:`batches`)."""
        info = self.info
        root, download = (
            (self.data_root, False)
            if self.foreign is not None
            else (self.data_root or self.config.data.root, self.config.data.download)
        )
        data = load_dataset(
            spec or info.dataset,
            split,
            root,
            download,
            info.image_size,
            info.channels,
            skip_corrupt=skip_corrupt,
            unreadable=self.unreadable,
        )
        if split == "train" and cap_train:
            data = data.seeded_subset(self.max_train, self.seed)
        return data

    @cached_property
    def num_classes(self) -> int:
        classes = self.info.num_classes
        if not classes:
            raise DatasetError(f"{self.name}: {self.info.dataset} is unlabeled; label-based suites need labels")
        return classes

    def batches(
        self, data: ImageSource, description: str
    ) -> Iterator[tuple[torch.Tensor | None, Any, Any, torch.Tensor]]:
        """(uint8 images, labels, indices, skipped indices) per batch; unreadable images are skipped."""
        return image_batches(data, self.batch_size, self.num_workers, description)

    # ----------------------------------------------------------------- model outputs
    def embed_fn(self, layer: str | None = None) -> Callable[[torch.Tensor], torch.Tensor]:
        """uint8 images -> features of ``layer`` (default: the context's feature layer), one batch on the
        model's device, with autograd (the adversarial suite takes input gradients through it)."""
        layer = self.check_layer(layer or self.feature_layer)
        if layer == "projection":
            return self.model.project_batch
        return {"backbone": self.embedder.embed_batch, "pixels": pixel_features}[layer]

    def check_layer(self, layer: str) -> str:
        """``layer`` if this model has it; one ConfigError naming the valid layers otherwise."""
        valid = FEATURE_LAYERS if self.foreign is None else tuple(n for n in FEATURE_LAYERS if n != "projection")
        if layer not in valid:
            raise ConfigError(
                f"unknown feature layer {layer!r}; valid: {', '.join(valid)}"
                + (" (a foreign encoder has no projection head)" if layer in FEATURE_LAYERS else "")
            )
        return layer

    @torch.no_grad()
    def outputs(self, images: torch.Tensor, uncertainty_score: str | None = None) -> dict[str, torch.Tensor]:
        """Backbone features, L2-normalized projection (not for a foreign encoder) and, for
        :class:`HasUncertainty` methods, the ``uncertainty_score`` (default: the method's first) of a batch, on CPU."""
        images = images.to(self.torch_device)
        out = {"features": self.encoder.embed(images).float()}
        if self.foreign is None:
            out["projection"] = F.normalize(self.model.project(images).float(), dim=1)
        if isinstance(self.encoder, HasUncertainty):
            out["uncertainty"] = self.encoder.uncertainty(images, score=uncertainty_score).float()
        return {k: v.cpu() for k, v in out.items()}

    def collect(
        self, data: ImageSource, description: str, uncertainty_score: str | None = None
    ) -> dict[str, torch.Tensor]:
        """:meth:`outputs` and labels of every readable image of ``data``."""
        return concat_batches(
            (
                {**self.outputs(images, uncertainty_score), "labels": labels}
                for images, labels, _, _ in self.batches(data, description)
                if images is not None
            ),
            data.name,
        )

    def features(
        self, split: Split, spec: str | None = None, layer: str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Cached (features, labels) of a split of ``spec`` (default: the training dataset): computed once per
        context and, for a run's model, stored in ``RUN/feature-cache/`` for later contexts on the same checkpoint
        (:mod:`probcl.eval.feature_cache`)."""
        layer = layer or self.feature_layer
        key = ("features", spec, split, layer)
        if key not in self._cache:
            data = self.dataset(spec, split)
            description = f"{layer} features: {data.name} {split}"
            if self.run_dir is None or layer == "pixels":  # an encoder without a run folder; pixels cost nothing
                self._cache[key] = self.extract(data, description, layer)
            else:
                self._cache[key] = self._stored_features(data, split, layer, description)
        return self._cache[key]

    def _stored_features(
        self, data: ImageSource, split: Split, layer: str, description: str
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`extract`, read from ``RUN/feature-cache/`` when stored there for this checkpoint, layer,
        precision, device and data, else computed and stored (unless images were skipped: their listing comes
        from the extraction)."""
        assert self.run_dir is not None
        cache_key = {
            "checkpoint": file_identity(self.checkpoint.path),
            "layer": layer,
            "precision": self.precision.precision,
            "device": self.torch_device.type,
            "data": {"name": data.name, "split": split, "images": len(data), "root": self.data_root},
            "train_subset": {"max_train": self.max_train, "seed": self.seed} if split == "train" else None,
        }
        path = feature_cache.cache_path(self.run_dir, cache_key)
        stored = feature_cache.read_features(path, cache_key)
        if stored is not None:
            return stored
        features, labels = self.extract(data, description, layer)
        if self.store_features and len(features) == len(data):
            why = feature_cache.write_features(path, cache_key, features, labels)
            if why is not None:
                self.note(f"features are not cached ({why})")
        return features, labels

    def split_features(
        self, split: Split, index: torch.Tensor, description: str, layer: str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(features, labels) of the images ``index`` of a split of the training dataset: rows of the cached
        features of the whole split when a suite has computed them, else extracted for these images only."""
        key = ("features", None, split, layer or self.feature_layer)
        data = self.dataset(None, split)
        if key in self._cache and len(self._cache[key][0]) == len(data):  # no image skipped: rows match indices
            features, labels = self._cache[key]
            return features[index], labels[index]
        return self.extract(data if len(index) == len(data) else data.subset(index), description, layer)

    def extract(
        self, data: ImageSource, description: str, layer: str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Uncached (features, labels) of any dataset (default: the context's feature layer), in the training
        precision (:attr:`precision`)."""
        with compute_precision(self.precision, self.torch_device):
            return extract(
                self.embed_fn(layer), data, self.batch_size, self.torch_device, description, self.num_workers
            )

    def linear_probe(self, probe: str = "lbfgs", sgd: SGDProbeOptions | None = None) -> tuple[dict, LinearProbe]:
        """The offline linear probe on the feature layer's train/test features (fitted once, then cached):
        ``lbfgs``, probcl's default (:mod:`probcl.eval.linear`), ``sgd``, the papers' SGD-trained classifier
        with the settings ``sgd``, or ``sgd-heldout``, that classifier's regime on standardised features with its
        lr chosen on held-out training features (:mod:`probcl.eval.linear_sgd`)."""
        if probe not in LINEAR_PROBES:
            raise ConfigError(f"unknown linear probe {probe!r}; valid: {', '.join(LINEAR_PROBES)}")
        sgd = sgd or SGDProbeOptions()
        key = ("probe", self.feature_layer, probe, *(dataclasses.astuple(sgd) if probe != "lbfgs" else ()))
        if key not in self._cache:
            train_f, train_y = self.features("train")
            test_f, test_y = self.features("test")
            if probe == "sgd":
                fitted = sgd_linear_probe(train_f, train_y, test_f, test_y, self.num_classes, sgd, self.seed)
            elif probe == "sgd-heldout":
                fitted = sgd_heldout_probe(train_f, train_y, test_f, test_y, self.num_classes, sgd, self.seed)
            else:
                fitted = linear_probe(train_f, train_y, test_f, test_y, self.num_classes, seed=self.seed)
            self._cache[key] = fitted
        return self._cache[key]

    def protocol(self, **extra: Any) -> dict:
        """What every suite result records about its inputs, plus ``extra``."""
        names = {"class_names": self.info.class_names} if self.info.class_names else {}
        return {
            "feature_layer": self.feature_layer,
            "train_images": len(self.features("train")[0]),
            "feature_precision": self.precision.precision,
            **names,
            **extra,
        }
