"""The built-in datasets, registered by name (``DATASETS``): the MNIST family from idx files, scikit-learn's
digits, and the torchvision datasets (CIFAR-10/100, SVHN, STL-10). Each is held in memory as uint8 tensors.

Where the files are looked for: ``--data-root``, then ``$PROBCL_DATA``, then the dataset's system location
(Fashion-MNIST: Debian's ``dataset-fashion-mnist``); torchvision downloads only with ``--download``.
"""

from __future__ import annotations

import gzip
import os
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from probcl.core.registry import Registry
from probcl.data.sources import TensorImages, resize_uint8
from probcl.data.specs import HOLDOUT_SEED, SPEC_FORMS, Split
from probcl.errors import DatasetError

FASHION_MNIST_SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")

Loader = Callable[..., TensorImages]
DATASETS: Registry[Loader] = Registry("dataset")
WITH_UNLABELED = {"stl10"}  # datasets whose pretrain split adds unlabeled images (label -1) to train


def dataset_names() -> list[str]:
    """Registered dataset names plus the path-prefixed specs and the class filter."""
    return DATASETS.names() + SPEC_FORMS


def data_root(root: str | None) -> Path:
    """Where torchvision keeps (or downloads) a dataset: ``root``, else ``$PROBCL_DATA``, else ``data``."""
    return Path(root or os.environ.get("PROBCL_DATA") or "data")


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

        target = data_root(root)
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


# ----------------------------------------------------------------------------- torchvision datasets


def _torchvision_dataset(name: str, cls_name: str, split_kw: Callable[[str], dict]) -> Loader:
    def loader(split: Split, root: str | None = None, download: bool = False) -> TensorImages:
        import torchvision

        target = data_root(root)
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
