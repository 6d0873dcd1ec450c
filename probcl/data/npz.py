"""``npz:PATH``: images in a NumPy ``.npz`` file, held in memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from probcl.data.sources import TensorImages, holdout_split
from probcl.data.specs import Split
from probcl.errors import DatasetError


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
    return data if has_test or split == "all" else data.subset(holdout_split(len(data), split))
