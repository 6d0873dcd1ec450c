"""``npz:PATH``: images in a NumPy ``.npz`` file, held in memory."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import torch

from probcl.data.sources import TensorImages, holdout_split
from probcl.data.specs import Split
from probcl.errors import DatasetError


def load_npz(path: Path, split: Split) -> TensorImages:
    """``x`` uint8 (N, H, W) or (N, H, W, C), optional ``y``; ``x_test``/``y_test`` for a test split. Split ``all``
    is every image of the file: ``x``, then ``x_test`` when there is one."""
    if not path.is_file():
        raise DatasetError(f"npz file {path} does not exist; check the path after `npz:`")
    if not zipfile.is_zipfile(path):  # np.load would read it as a pickle, and say so
        raise DatasetError(f"{path} is not an .npz file (not a zip archive); save the images with numpy.savez")
    try:
        arrays = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise DatasetError(f"cannot read {path} as .npz: {e}") from None
    if "x" not in arrays:
        raise DatasetError(
            f"{path} has no array 'x' (found: {', '.join(arrays.files)}); save images as x=uint8 (N, H, W[, C])"
        )
    if "x_test" not in arrays:
        data = _images(arrays, path, "x", "y")
        return data if split == "all" else data.subset(holdout_split(len(data), split))
    if split == "all":
        return TensorImages.concatenate(
            [_images(arrays, path, "x", "y"), _images(arrays, path, "x_test", "y_test")], f"npz:{path}"
        )
    return _images(arrays, path, "x_test", "y_test") if split == "test" else _images(arrays, path, "x", "y")


def _array(arrays: np.lib.npyio.NpzFile, path: Path, key: str) -> np.ndarray | None:
    """Array ``key`` of the file (None when absent); one that cannot be read without pickle is one DatasetError."""
    if key not in arrays:
        return None
    try:
        return arrays[key]
    except (OSError, ValueError) as e:  # an object array (allow_pickle=False), a damaged member
        raise DatasetError(f"{path}: cannot read array '{key}' ({e}); save it as a plain uint8 / int64 array") from None


def _images(arrays: np.lib.npyio.NpzFile, path: Path, xkey: str, ykey: str) -> TensorImages:
    """The images ``xkey`` with their labels ``ykey`` (if any), checked."""
    x, y = _array(arrays, path, xkey), _array(arrays, path, ykey)
    assert x is not None  # the caller checked that the file holds it
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
    if len(x) == 0:
        raise DatasetError(f"{path}: '{xkey}' holds no images (shape {x.shape}); save at least one")
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
    return TensorImages(images, labels, f"npz:{path}")
