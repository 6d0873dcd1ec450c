"""Dataset registry: every dataset yields ``(uint8 image C x H x W, label, index)``.

Small datasets are held in memory as uint8 tensors (:class:`TensorImages`); folders of
image files stream: each image is decoded when a batch needs it, in DataLoader worker
processes (:class:`FolderImages`; ``folder:PATH:stream=false`` decodes a small folder into
memory once instead). Unlabeled images have label -1. Specs are registry names
(``fashion-mnist``, ``digits``, ...) or ``folder:PATH`` / ``npz:PATH``.

Splits: ``train``, ``test``, ``all`` (both), and ``pretrain``: the images a method pretrains on,
the training split plus a dataset's unlabeled images where it has them (STL-10's 100,000).
"""

from __future__ import annotations

import gzip
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from probcl.core.progress import progress
from probcl.core.registry import Registry
from probcl.data.specs import CLASS_FILTER, SPEC_FORMS
from probcl.errors import ConfigError, DatasetError

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

Split = Literal["train", "test", "all", "pretrain"]
SPLITS = ("train", "test", "all", "pretrain")
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"}
FASHION_MNIST_SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")
HOLDOUT_FRACTION = 0.2  # test share of folder/npz datasets that have no explicit test split
HOLDOUT_SEED = 0
STREAM_OPTION = ":stream="  # folder:PATH:stream=false holds the decoded folder in memory


class CorruptImageError(DatasetError):
    """An image file that cannot be decoded."""

    def __init__(self, message: str) -> None:
        # A DataLoader raises a worker's error again in the main process as CorruptImageError("Caught
        # CorruptImageError in DataLoader worker process N. Original Traceback ... CorruptImageError: <message>"):
        # keep the one-line message.
        marker = f"{type(self).__name__}: "
        if message.startswith("Caught ") and marker in message:
            message = message.rsplit(marker, 1)[1].strip()
        super().__init__(message)


class ImageSource(Dataset):
    """Common interface of all datasets: ``(image uint8 CxHxW, label int, index int)`` items."""

    name: str
    channels: int
    image_size: int
    num_classes: int | None

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
        return TensorImages(images, self.labels(), self.name, self.num_classes)


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

    def subset(self, indices: torch.Tensor | Sequence[int]) -> TensorImages:
        indices = torch.as_tensor(indices, dtype=torch.long)
        labels = None if self._labels is None else self._labels[indices]
        return TensorImages(self.images[indices], labels, self.name, self.num_classes)

    def to_memory(self, num_workers: int = 0, batch_size: int = 256) -> TensorImages:
        return self

    def batches(self, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(images, labels, indices, no skipped indices) in order, as slices: no per-image indexing or collation."""
        labels = self._labels if self._labels is not None else torch.full((len(self),), -1, dtype=torch.long)
        none = torch.zeros(0, dtype=torch.long)
        for start in range(0, len(self), batch_size):
            end = min(start + batch_size, len(self))
            yield self.images[start:end], labels[start:end], torch.arange(start, end), none


class PathTable:
    """File paths packed in one byte array with offsets: no Python object per file, so that forked
    DataLoader workers share the table instead of copying it page by page (reference counts of a list
    of a million ``Path`` objects would touch every page)."""

    def __init__(self, data: np.ndarray, offsets: np.ndarray) -> None:
        self._data, self._offsets = data, offsets

    @classmethod
    def of(cls, paths: Sequence[str | Path]) -> PathTable:
        encoded = [os.fsencode(p) for p in paths]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        return cls(np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, index: int) -> Path:
        if not -len(self) <= index < len(self):
            raise IndexError(f"path index {index} out of range for {len(self)} paths")
        index %= len(self)
        return Path(os.fsdecode(self._data[self._offsets[index] : self._offsets[index + 1]].tobytes()))

    def __iter__(self) -> Iterator[Path]:
        return (self[i] for i in range(len(self)))

    def take(self, indices: Sequence[int]) -> PathTable:
        """The paths at ``indices``, as a new table (gathered without decoding them)."""
        chosen = np.asarray(indices, dtype=np.int64).reshape(-1)
        starts, lengths = self._offsets[chosen], np.diff(self._offsets)[chosen]
        offsets = np.zeros(len(chosen) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return PathTable(self._data[np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])], offsets)


class FolderImages(ImageSource):
    """Image files decoded on access (in DataLoader workers), resized to a square ``image_size``.

    With ``skip_corrupt`` an unreadable file yields ``image=None`` instead of raising, so that
    scoring can report and skip it (see :func:`collate_skip_corrupt`).
    """

    def __init__(
        self,
        paths: PathTable,
        labels: torch.Tensor | None,
        classes: list[str],
        name: str,
        image_size: int,
        channels: int,
        skip_corrupt: bool = False,
    ) -> None:
        self.paths = paths
        self._labels = labels
        self.classes = classes
        self.name = name
        self.image_size = image_size
        self.channels = channels
        self.num_classes = len(classes) or None
        self.skip_corrupt = skip_corrupt

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        label = -1 if self._labels is None else int(self._labels[index])
        try:
            image = decode_image(self.paths[index], self.image_size, self.channels)
        except CorruptImageError:
            if not self.skip_corrupt:
                raise
            image = None
        return image, label, index

    def labels(self) -> torch.Tensor | None:
        return self._labels

    def item_id(self, index: int) -> str:
        return str(self.paths[index])

    def subset(self, indices: torch.Tensor | Sequence[int]) -> FolderImages:
        chosen = torch.as_tensor(indices, dtype=torch.long)
        labels = None if self._labels is None else self._labels[chosen]
        return FolderImages(
            self.paths.take(chosen.tolist()),
            labels,
            self.classes,
            self.name,
            self.image_size,
            self.channels,
            self.skip_corrupt,
        )


def image_batches(data: Dataset, batch_size: int, num_workers: int, description: str) -> Iterator:
    """(uint8 images or None, labels, indices, skipped indices) per batch of ``data`` in order, with a
    progress bar; unreadable images are skipped (see :func:`collate_skip_corrupt`). In-memory images are sliced."""
    if isinstance(data, TensorImages):
        yield from progress(data.batches(batch_size), description, total=-(-len(data) // batch_size))
        return
    loader = DataLoader(
        data, batch_size=batch_size, shuffle=False, num_workers=num_workers, collate_fn=collate_skip_corrupt
    )
    yield from progress(loader, description)


def collate_skip_corrupt(items):
    """Collate that drops items whose image could not be decoded; returns (x, y, idx, skipped_idx)."""
    good = [it for it in items if it[0] is not None]
    skipped = torch.tensor([it[2] for it in items if it[0] is None], dtype=torch.long)
    if not good:
        return None, None, None, skipped
    x = torch.stack([it[0] for it in good])
    y = torch.tensor([it[1] for it in good], dtype=torch.long)
    idx = torch.tensor([it[2] for it in good], dtype=torch.long)
    return x, y, idx, skipped


def decode_image(path: Path, image_size: int, channels: int) -> torch.Tensor:
    """Read an image file as a uint8 (C, S, S) tensor, or raise CorruptImageError naming the file."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as file:
            return pil_to_uint8(file, image_size, channels)
    except Image.DecompressionBombError as e:
        raise CorruptImageError(f"image {path} is too large to decode safely ({e}); downscale it first") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise CorruptImageError(
            f"cannot read image {path}: {e}. Remove or replace this file "
            f"(`probcl score` reports and skips unreadable images)."
        ) from None


def pil_to_uint8(img: PILImage, image_size: int, channels: int) -> torch.Tensor:
    """A PIL image as a uint8 (C, S, S) tensor: 16/32-bit pixels scaled to 8 bits (never clipped), converted
    to ``channels`` (L or RGB) and resized (bilinear) to ``image_size``, the same for every image file."""
    from PIL import Image

    if img.mode.startswith("I"):
        wide = np.asarray(img, dtype=np.float64)
        img = Image.fromarray(
            np.round(wide * (255.0 / (65535.0 if wide.max() <= 65535 else wide.max()))).astype(np.uint8)
        )
    img = img.convert("L" if channels == 1 else "RGB")
    if img.size != (image_size, image_size):
        img = img.resize((image_size, image_size), Image.Resampling.BILINEAR)
    arr = np.asarray(img, dtype=np.uint8)
    arr = arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)
    return torch.from_numpy(arr.copy())


# ----------------------------------------------------------------------------- registry

Loader = Callable[..., TensorImages]
DATASETS: Registry[Loader] = Registry("dataset")
PREFIXED = ("folder:", "npz:")


def dataset_names() -> list[str]:
    """Registered dataset names plus the path-prefixed specs and the class filter."""
    return DATASETS.names() + SPEC_FORMS


def parse_classes(text: str, spec: str) -> list[int]:
    """``0-7`` / ``8,9`` / ``0-3,7`` -> class indices, in order, without repeats."""
    classes: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            classes += [c for c in range(int(lo), int(hi or lo) + 1) if c not in classes]
    except ValueError:
        raise DatasetError(f"{spec}: classes must look like 0-7 or 8,9 (class indices), got {text!r}") from None
    if not classes:
        raise DatasetError(f"{spec}: no classes given; e.g. {spec.split(CLASS_FILTER)[0]}{CLASS_FILTER}0-7")
    return classes


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


def load_dataset(
    spec: str,
    split: Split = "train",
    root: str | None = None,
    download: bool = False,
    image_size: int | None = None,
    channels: int | None = None,
    skip_corrupt: bool = False,
) -> ImageSource:
    """Load ``split`` of the dataset ``spec``, optionally resized and converted to ``channels``.

    ``pretrain`` is the training split plus the dataset's unlabeled images where it has them
    (:data:`WITH_UNLABELED`); a class filter keeps labeled images only."""
    if split not in SPLITS:
        raise DatasetError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    if split == "pretrain" and (spec.startswith(PREFIXED) or CLASS_FILTER in spec or spec not in WITH_UNLABELED):
        split = "train"
    if CLASS_FILTER in spec and not spec.startswith(PREFIXED):
        base, _, text = spec.partition(CLASS_FILTER)
        data = load_dataset(base, split, root, download, None, None)
        return conform(keep_classes(data, parse_classes(text, spec), spec), channels, image_size)
    if spec.startswith("folder:"):
        path, stream = folder_spec(spec)
        folder = load_folder(path, split, image_size, channels, skip_corrupt)
        return folder if stream or skip_corrupt else folder.to_memory()
    if spec.startswith("npz:"):
        data = load_npz(Path(spec[len("npz:") :]), split)
    else:
        loader = DATASETS.get(spec)
        if split == "all":
            parts = [loader(s, root=root, download=download) for s in ("train", "test")]
            known = [y for y in (p.labels() for p in parts) if y is not None]
            labels = torch.cat(known) if len(known) == len(parts) else None
            data = TensorImages(torch.cat([p.images for p in parts]), labels, spec, parts[0].num_classes)
        else:
            data = loader(split, root=root, download=download)
    return conform(data, channels, image_size)


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


def _holdout_split(n: int, split: Split) -> torch.Tensor:
    if split == "all":
        return torch.arange(n)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(HOLDOUT_SEED))
    n_test = max(1, int(round(HOLDOUT_FRACTION * n)))
    return torch.sort(perm[:n_test] if split == "test" else perm[n_test:]).values


# ----------------------------------------------------------------------------- idx (MNIST family)


def read_idx(path: Path) -> np.ndarray:
    """Parse an IDX file (optionally gzipped), as used by MNIST and Fashion-MNIST."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            raw = fh.read()
    except (OSError, EOFError) as e:
        raise DatasetError(
            f"cannot read {path}: {e}. The file is damaged: delete it and reinstall or re-download."
        ) from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise DatasetError(f"{path} is not an unsigned-byte IDX file (bad magic number)")
    ndim = raw[3]
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise DatasetError(f"{path}: header says {dims} but holds {data.size} bytes; the file is truncated")
    return data.reshape(dims)


def _find_idx_dir(name: str, torchvision_folder: str, root: str | None, system_dir: Path | None) -> Path | None:
    candidates = []
    for given in (root, os.environ.get("PROBCL_DATA")):
        if given:
            base = Path(given)
            candidates += [base, base / name, base / torchvision_folder / "raw"]
    if system_dir is not None:
        candidates.append(system_dir)
    for folder in candidates:
        if any((folder / f"train-images-idx3-ubyte{ext}").exists() for ext in (".gz", "")):
            return folder
    return None


def _idx_file(folder: Path, stem: str) -> Path:
    for ext in (".gz", ""):
        if (folder / f"{stem}{ext}").exists():
            return folder / f"{stem}{ext}"
    raise DatasetError(f"{folder} lacks {stem}(.gz); the dataset folder is incomplete")


def _load_idx_dataset(
    name: str, torchvision_cls: str, system_dir: Path | None, hint: str, split: Split, root: str | None, download: bool
) -> TensorImages:
    folder = _find_idx_dir(name, torchvision_cls, root, system_dir)
    if folder is None and download:
        import torchvision

        target = Path(root or os.environ.get("PROBCL_DATA") or "data")
        getattr(torchvision.datasets, torchvision_cls)(str(target), train=True, download=True)
        folder = target / torchvision_cls / "raw"
    if folder is None:
        raise DatasetError(
            f"{name} not found. {hint}, point --data-root (or $PROBCL_DATA) at a folder holding "
            f"train-images-idx3-ubyte.gz and friends, or pass --download to fetch it with torchvision."
        )
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(_idx_file(folder, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(_idx_file(folder, f"{prefix}-labels-idx1-ubyte"))
    if images.ndim != 3 or len(images) != len(labels):
        raise DatasetError(f"{folder}: images {images.shape} and labels {labels.shape} do not match")
    return TensorImages(torch.from_numpy(images.copy())[:, None], torch.from_numpy(labels.astype(np.int64)), name, 10)


@DATASETS.register("fashion-mnist")
def fashion_mnist(split: Split, root: str | None = None, download: bool = False) -> TensorImages:
    """Fashion-MNIST (60k/10k, 28x28 gray, 10 classes); Debian's dataset-fashion-mnist by default."""
    return _load_idx_dataset(
        "fashion-mnist",
        "FashionMNIST",
        FASHION_MNIST_SYSTEM_DIR,
        "Install it with `apt-get install dataset-fashion-mnist`",
        split,
        root,
        download,
    )


@DATASETS.register("mnist")
def mnist(split: Split, root: str | None = None, download: bool = False) -> TensorImages:
    """MNIST (60k/10k, 28x28 gray, 10 classes)."""
    return _load_idx_dataset("mnist", "MNIST", None, "Place the MNIST idx files in a folder", split, root, download)


@DATASETS.register("digits")
def digits(split: Split, root: str | None = None, download: bool = False) -> TensorImages:
    """scikit-learn's bundled 8x8 handwritten digits (1797 images), upscaled to 28x28, 70/30 split."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = torch.from_numpy(np.round(bunch.images * (255.0 / 16.0)).astype(np.uint8))[:, None]
    images = resize_uint8(images, 28)
    labels = torch.from_numpy(bunch.target.astype(np.int64))
    perm = torch.randperm(len(images), generator=torch.Generator().manual_seed(HOLDOUT_SEED))
    n_train = int(0.7 * len(images))
    idx = torch.sort(perm[:n_train] if split == "train" else perm[n_train:]).values
    return TensorImages(images[idx], labels[idx], "digits", 10)


def _torchvision_dataset(name: str, cls_name: str, split_kw: Callable[[str], dict]):
    def loader(split: Split, root: str | None = None, download: bool = False) -> TensorImages:
        import torchvision

        target = Path(root or os.environ.get("PROBCL_DATA") or "data")
        try:
            ds = getattr(torchvision.datasets, cls_name)(str(target), download=download, **split_kw(split))
        except RuntimeError as e:
            raise DatasetError(
                f"{name} not found under {target} ({e}). Point --data-root (or $PROBCL_DATA) at the folder "
                f"holding it, or pass --download to fetch it with torchvision."
            ) from None
        data = np.asarray(ds.data)
        if data.ndim == 4 and data.shape[-1] == 3:  # CIFAR stores N, H, W, C
            data = data.transpose(0, 3, 1, 2)
        labels = getattr(ds, "targets", None)
        if labels is None:
            labels = ds.labels
        labels = torch.as_tensor(np.asarray(labels), dtype=torch.long)
        return TensorImages(
            torch.from_numpy(np.ascontiguousarray(data)), labels, name, len(getattr(ds, "classes", [])) or None
        )

    loader.__doc__ = f"{name} via torchvision.datasets.{cls_name} (root folder, --download to fetch)."
    return loader


DATASETS.register("cifar10")(_torchvision_dataset("cifar10", "CIFAR10", lambda s: {"train": s == "train"}))
DATASETS.register("cifar100")(_torchvision_dataset("cifar100", "CIFAR100", lambda s: {"train": s == "train"}))
DATASETS.register("svhn")(_torchvision_dataset("svhn", "SVHN", lambda s: {"split": s}))
DATASETS.register("stl10")(
    _torchvision_dataset("stl10", "STL10", lambda s: {"split": "train+unlabeled" if s == "pretrain" else s})
)
WITH_UNLABELED = {"stl10"}  # datasets whose pretrain split adds unlabeled images (label -1) to train


# ----------------------------------------------------------------------------- folder: and npz:


def load_npz(path: Path, split: Split) -> TensorImages:
    """``x`` uint8 (N, H, W) or (N, H, W, C), optional ``y``; ``x_test``/``y_test`` for a test split."""
    if not path.is_file():
        raise DatasetError(f"npz file {path} does not exist; check the path after `npz:`")
    try:
        arrays = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise DatasetError(f"cannot read {path} as .npz: {e}") from None
    if "x" not in arrays:
        raise DatasetError(
            f"{path} has no array 'x' (found: {', '.join(arrays.files)}); save images as x=uint8 (N, H, W[, C])"
        )
    has_test = "x_test" in arrays
    xkey, ykey = ("x_test", "y_test") if (split == "test" and has_test) else ("x", "y")
    x, y = arrays[xkey], arrays[ykey] if ykey in arrays else None
    if x.dtype != np.uint8:
        raise DatasetError(
            f"{path}: '{xkey}' has dtype {x.dtype}; convert to uint8 in 0..255 (e.g. (x * 255).round().astype('uint8'))"
        )
    if x.ndim == 3:
        x = x[:, None]
    elif x.ndim == 4 and x.shape[-1] in (1, 3):
        x = x.transpose(0, 3, 1, 2)
    else:
        raise DatasetError(f"{path}: '{xkey}' has shape {x.shape}; expected (N, H, W) or (N, H, W, C) with C in 1, 3")
    if x.shape[-1] != x.shape[-2]:
        raise DatasetError(
            f"{path}: images are {x.shape[-2]}x{x.shape[-1]}; only square images are supported, crop or pad them"
        )
    if y is not None and (y.ndim != 1 or len(y) != len(x)):
        raise DatasetError(
            f"{path}: '{ykey}' has shape {y.shape} but '{xkey}' holds {len(x)} images; expected ({len(x)},)"
        )
    if y is not None and not np.issubdtype(y.dtype, np.integer):
        raise DatasetError(f"{path}: '{ykey}' has dtype {y.dtype}; labels must be integer class ids (int64)")
    if y is not None and len(y) and y.min() < -1:
        raise DatasetError(f"{path}: '{ykey}' holds {int(y.min())}; labels must be >= 0 (or -1 for unlabeled)")
    images = torch.from_numpy(np.ascontiguousarray(x))
    labels = None if y is None else torch.from_numpy(y.astype(np.int64))
    data = TensorImages(images, labels, f"npz:{path}")
    return data if has_test or split == "all" else data.subset(_holdout_split(len(data), split))


def folder_spec(spec: str) -> tuple[Path, bool]:
    """``folder:PATH[:stream=true|false]`` -> (PATH, stream)."""
    body = spec[len("folder:") :]
    head, sep, value = body.rpartition(STREAM_OPTION)
    if not sep:
        return Path(body), True
    if value not in ("true", "false"):
        raise DatasetError(f"{spec}: stream must be true or false, got {value!r}")
    return Path(head), value == "true"


def load_folder(
    path: Path, split: Split, image_size: int | None, channels: int | None, skip_corrupt: bool = False
) -> FolderImages:
    """Class sub-folders (labeled) or a flat folder (unlabeled); ``train/`` and ``test/`` (or ``val/``, as
    ImageNet has) sub-folders when present, otherwise a seeded 80/20 split. Only file names are read here
    (and the first image, for its channels): images are decoded when an item is read."""
    if not path.is_dir():
        raise DatasetError(f"folder {path} does not exist; check the path after `folder:`")
    test_dir = next((path / name for name in ("test", "val") if (path / name).is_dir()), None)
    has_splits = (path / "train").is_dir() and test_dir is not None
    if has_splits and test_dir is not None:
        bases = {"train": [path / "train"], "test": [test_dir]}.get(split, [path / "train", test_dir])
    else:
        bases = [path]
    found = [(base, rel) for base in bases for rel in _image_files(base)]
    if not found:
        raise DatasetError(f"no images ({', '.join(sorted(IMAGE_SUFFIXES))}) found under {bases[0]}")
    labeled = all(len(rel) == 2 for _, rel in found)  # every image in a class sub-folder
    classes = sorted({rel[0] for _, rel in found}) if labeled else []
    index = {name: i for i, name in enumerate(classes)}
    labels = torch.tensor([index[rel[0]] for _, rel in found], dtype=torch.long) if labeled else None
    keep = torch.arange(len(found)) if has_splits else _holdout_split(len(found), split)
    if not len(keep):
        raise DatasetError(
            f"folder {path} holds too few images for a {split} split (the held-out test share is "
            f"{HOLDOUT_FRACTION:.0%}); add images, or make train/ and test/ sub-folders"
        )
    paths = PathTable.of([os.path.join(found[i][0], *found[i][1]) for i in keep.tolist()])
    if channels is None:
        channels = _guess_channels(paths[0])
    return FolderImages(
        paths,
        None if labels is None else labels[keep],
        classes,
        f"folder:{path}",
        image_size or 64,
        channels,
        skip_corrupt,
    )


def _image_files(base: Path) -> list[tuple[str, ...]]:
    """Image files under ``base`` (recursively; linked folders followed once) as path parts relative to ``base``,
    sorted as paths sort. One directory listing per folder, no call per file."""
    found, seen = [], set()
    for folder, subfolders, names in os.walk(base, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:  # a link back up the tree
            subfolders.clear()
            continue
        seen.add(real)
        rel = Path(folder).relative_to(base).parts
        found += [(*rel, name) for name in names if os.path.splitext(name)[1].lower() in IMAGE_SUFFIXES]
    return sorted(found)


def _guess_channels(path: Path) -> int:
    from PIL import Image

    try:
        with Image.open(path) as img:
            return 1 if img.mode in ("L", "1", "I;16", "I") else 3
    except (OSError, Image.DecompressionBombError):
        return 3  # decoding the file later reports the problem
