"""Image sources: every dataset yields ``(uint8 image C x H x W, label, index)`` items (label -1 = unlabeled).

:class:`ImageSource` is the common interface; :class:`TensorImages` holds a dataset in memory. Seeded subsets,
class filters and the conversion of an in-memory set to other channels and sizes live here too.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from probcl.data.specs import HOLDOUT_FRACTION, HOLDOUT_SEED, Split
from probcl.errors import ConfigError, DatasetError


class ImageSource(Dataset):
    """Common interface of all datasets: ``(image uint8 CxHxW, label int, index int)`` items."""

    name: str
    channels: int
    image_size: int
    num_classes: int | None
    channels_note: str = ""  # how the channel count was chosen, where it was not given (folders: the colour rule)
    class_names: list[str] | None = None  # the name of each label, where the data names them (a folder's sub-folders)

    def __len__(self) -> int:
        raise NotImplementedError

    def labels(self) -> torch.Tensor | None:
        """All labels as an int64 tensor (-1 = unlabeled), or None when the set has no labels."""
        raise NotImplementedError

    def item_id(self, index: int) -> str:
        """A stable identifier of item ``index`` (file path for folders)."""
        return str(index)

    def subset(self, indices: torch.Tensor | Sequence[int]) -> ImageSource:
        """The items at ``indices``, as a source of the same kind."""
        raise NotImplementedError

    def batch(self, indices: Sequence[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The items at ``indices`` as one batch: (uint8 images N x C x H x W, int64 labels, int64 indices)."""
        items = [self[int(i)] for i in indices]
        return (
            torch.stack([image for image, _, _ in items]),
            torch.tensor([label for _, label, _ in items], dtype=torch.long),
            torch.tensor([index for _, _, index in items], dtype=torch.long),
        )

    def seeded_indices(self, count: int | None, seed: int = 0) -> torch.Tensor:
        """All indices, or ``count`` distinct sorted ones from a seeded permutation (``count`` None = all)."""
        if count is not None and count < 1:
            raise ConfigError(f"a subset of {self.name} needs at least 1 image, got {count}")
        if count is None or count >= len(self):
            return torch.arange(len(self))
        return random_subset(len(self), count, seed)

    def seeded_subset(self, count: int | None, seed: int = 0) -> ImageSource:
        """This source, or a seeded subset of ``count`` of its items (see :meth:`seeded_indices`)."""
        indices = self.seeded_indices(count, seed)
        return self if len(indices) == len(self) else self.subset(indices)

    def to_memory(self, num_workers: int = 0, batch_size: int = 256) -> TensorImages:
        """All items decoded into one uint8 tensor (by ``num_workers`` loader processes); in-memory sources
        return themselves."""
        images = torch.empty((len(self), self.channels, self.image_size, self.image_size), dtype=torch.uint8)
        start = 0
        for batch, _, _ in DataLoader(self, batch_size=batch_size, num_workers=num_workers):
            images[start : start + len(batch)] = batch
            start += len(batch)
        memory = TensorImages(images, self.labels(), self.name, self.num_classes)
        memory.channels_note, memory.class_names = self.channels_note, self.class_names
        return memory


class TensorImages(ImageSource):
    """An in-memory dataset of uint8 images (N, C, H, W) and optional int64 labels."""

    def __init__(
        self, images: torch.Tensor, labels: torch.Tensor | None, name: str, num_classes: int | None = None
    ) -> None:
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise DatasetError(
                f"{name}: images must be a uint8 tensor (N, C, H, W), got {images.dtype} {tuple(images.shape)}"
            )
        if labels is not None and len(labels) != len(images):
            raise DatasetError(f"{name}: {len(images)} images but {len(labels)} labels")
        self.images = images.contiguous()
        self._labels = None if labels is None else labels.long()
        self.name = name
        self.channels = images.shape[1]
        self.image_size = images.shape[-1]
        if num_classes is None and self._labels is not None and (self._labels >= 0).any():
            num_classes = int(self._labels.max()) + 1
        self.num_classes = num_classes

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        label = -1 if self._labels is None else int(self._labels[index])
        return self.images[index], label, index

    def labels(self) -> torch.Tensor | None:
        return self._labels

    @staticmethod
    def concatenate(parts: Sequence[TensorImages], name: str) -> TensorImages:
        """The images of ``parts`` one after the other (a dataset's split ``all``: its train, then its test images);
        labels when every part has them; parts of other image shapes are one DatasetError naming both."""
        shapes = {tuple(part.images.shape[1:]) for part in parts}
        if len(shapes) > 1:
            raise DatasetError(
                f"{name}: its splits hold images of different shapes ({' and '.join(map(str, sorted(shapes)))}, "
                f"as (C, H, W)); save them at one size"
            )
        known = [labels for part in parts if (labels := part.labels()) is not None]
        joined = torch.cat(known) if len(known) == len(parts) else None
        classes = [part.num_classes for part in parts if part.num_classes is not None]
        return TensorImages(torch.cat([part.images for part in parts]), joined, name, max(classes, default=None))

    def subset(self, indices: torch.Tensor | Sequence[int]) -> TensorImages:
        indices = torch.as_tensor(indices, dtype=torch.long)
        labels = None if self._labels is None else self._labels[indices]
        part = TensorImages(self.images[indices], labels, self.name, self.num_classes)
        part.channels_note, part.class_names = self.channels_note, self.class_names
        return part

    def to_memory(self, num_workers: int = 0, batch_size: int = 256) -> TensorImages:
        return self

    def batch(self, indices: Sequence[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One indexing operation per batch (no per-image items, no collation), on the device the images are on."""
        index = torch.as_tensor(indices, dtype=torch.long).to(self.images.device, non_blocking=True)
        labels = self._labels[index] if self._labels is not None else torch.full_like(index, -1)
        return self.images[index], labels, index

    def to(self, device: torch.device) -> TensorImages:
        """The same images and labels, held on ``device``."""
        labels = None if self._labels is None else self._labels.to(device)
        moved = TensorImages(self.images.to(device), labels, self.name, self.num_classes)
        moved.channels_note = self.channels_note
        return moved

    def nbytes(self) -> int:
        """Bytes of the images and labels."""
        labels = 0 if self._labels is None else self._labels.nbytes
        return self.images.nbytes + labels

    def batches(self, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(images, labels, indices, no skipped indices) in order, as slices: no per-image indexing or collation."""
        labels = self._labels if self._labels is not None else torch.full((len(self),), -1, dtype=torch.long)
        none = torch.zeros(0, dtype=torch.long)
        for start in range(0, len(self), batch_size):
            end = min(start + batch_size, len(self))
            yield self.images[start:end], labels[start:end], torch.arange(start, end), none


def keep_classes(data: ImageSource, classes: list[int], spec: str) -> TensorImages:
    """The images of ``classes`` (labels renumbered 0..K-1 in the order given): held-out-class splits
    give a near-OOD set without any extra download (train on 0-7, the OOD set is 8,9)."""
    labels = data.labels()
    if not isinstance(data, TensorImages) or labels is None:
        raise DatasetError(f"{spec}: a class filter needs a labeled in-memory dataset (not {data.name})")
    known = set(range(data.num_classes)) if data.num_classes else set(labels.unique().tolist())
    unknown = [c for c in classes if c not in known]
    if unknown:
        raise DatasetError(f"{spec}: classes {unknown} do not exist in {data.name} (classes 0-{max(known)})")
    mapping = torch.full((max(max(known), *classes) + 1,), -1, dtype=torch.long)
    mapping[torch.tensor(classes)] = torch.arange(len(classes))
    keep = torch.nonzero((labels >= 0) & (mapping[labels.clamp_min(0)] >= 0)).flatten()  # unlabeled images: out
    return TensorImages(data.images[keep], mapping[labels[keep]], spec, len(classes))


def conform(data: TensorImages, channels: int | None, image_size: int | None) -> TensorImages:
    """Convert an in-memory set to ``channels`` (gray <-> RGB) and a square ``image_size``."""
    images = data.images
    if channels is not None and channels != images.shape[1]:
        if channels == 3 and images.shape[1] == 1:
            images = images.expand(-1, 3, -1, -1)
        elif channels == 1 and images.shape[1] == 3:
            weights = torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)
            images = (images.float() * weights).sum(1, keepdim=True).round().clamp(0, 255).to(torch.uint8)
        else:
            raise DatasetError(f"{data.name}: cannot convert {images.shape[1]} channels to {channels}")
    if image_size is not None and images.shape[-1] != image_size:
        images = resize_uint8(images, image_size)
    if images is data.images:
        return data
    return TensorImages(images, data.labels(), data.name, data.num_classes)


def resize_uint8(images: torch.Tensor, size: int, chunk: int = 4096) -> torch.Tensor:
    """Bilinear (antialiased) resize of uint8 (N, C, H, W) images to (N, C, size, size)."""
    out = []
    for start in range(0, len(images), chunk):
        x = images[start : start + chunk].float()
        x = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        out.append(x.round().clamp(0, 255).to(torch.uint8))
    return torch.cat(out)


def labeled_subset(labels: torch.Tensor, fraction: float, seed: int = 0) -> torch.Tensor:
    """Indices of a class-stratified ``fraction`` of the labeled items (at least one per class)."""
    if not 0 < fraction <= 1:
        raise ConfigError(f"labeled fraction must be in (0, 1], got {fraction}")
    if not bool((labels >= 0).any()):
        raise DatasetError(
            "the dataset has no class labels, which this step needs (a linear probe, kNN, calibration, ...): give a "
            "folder with one subfolder per class, or choose suites that need no labels (e.g. --suite ood)"
        )
    generator = torch.Generator().manual_seed(seed)
    chosen = []
    for cls in torch.unique(labels[labels >= 0]):
        members = torch.nonzero(labels == cls).flatten()
        count = max(1, round(fraction * len(members)))
        chosen.append(members[torch.randperm(len(members), generator=generator)[:count]])
    return torch.sort(torch.cat(chosen)).values


def random_subset(n: int, count: int, seed: int = 0) -> torch.Tensor:
    """``count`` distinct indices out of ``n``, sorted, from a seeded permutation."""
    generator = torch.Generator().manual_seed(seed)
    return torch.sort(torch.randperm(n, generator=generator)[:count]).values


def pretraining_indices(n: int, train_subset: int | None, seed: int) -> torch.Tensor:
    """Which of a training split's ``n`` images a run pretrains on: all, or its seeded ``data.train_subset``
    (seeded by ``train.seed``)."""
    if train_subset is None or train_subset >= n:
        return torch.arange(n)
    return random_subset(n, train_subset, seed)


def holdout_split(n: int, split: Split) -> torch.Tensor:
    """Indices of ``split`` of ``n`` items that have no explicit test split: a seeded
    :data:`~probcl.data.specs.HOLDOUT_FRACTION` is the test split, the rest the training split."""
    if split == "all":
        return torch.arange(n)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(HOLDOUT_SEED))
    n_test = max(1, int(round(HOLDOUT_FRACTION * n)))
    return torch.sort(perm[:n_test] if split == "test" else perm[n_test:]).values
