"""Loading any dataset spec (:func:`load_dataset`), and batching images in order with unreadable ones skipped.

Four families: registered names (:mod:`probcl.data.builtin`), a class filter on one, ``folder:PATH``
(:mod:`probcl.data.folders`, streamed; ``:stream=false`` decodes it into memory once) and ``npz:PATH``
(:mod:`probcl.data.npz`). Splits: ``train``, ``test``, ``all`` (both), and ``pretrain``: the images a method
pretrains on, the training split plus a dataset's unlabeled images where it has them (STL-10's 100,000).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from probcl.core.progress import progress
from probcl.data.builtin import DATASETS, WITH_UNLABELED
from probcl.data.folders import load_folder
from probcl.data.npz import load_npz
from probcl.data.sources import ImageSource, TensorImages, conform, keep_classes
from probcl.data.specs import (
    CLASS_FILTER,
    SPLITS,
    Split,
    folder_spec,
    is_path_spec,
    parse_classes,
    unknown_dataset_message,
)
from probcl.data.unreadable import UnreadableFiles
from probcl.errors import DatasetError, UnknownNameError


def load_dataset(
    spec: str,
    split: Split = "train",
    root: str | None = None,
    download: bool = False,
    image_size: int | None = None,
    channels: int | None = None,
    skip_corrupt: bool = False,
    unreadable: UnreadableFiles | None = None,
) -> ImageSource:
    """Load ``split`` of the dataset ``spec``, optionally resized and converted to ``channels``.

    ``pretrain`` is the training split plus the dataset's unlabeled images where it has them
    (:data:`~probcl.data.builtin.WITH_UNLABELED`); a class filter keeps labeled images only. A folder's files
    are checked before any is decoded, under the ``unreadable`` policy (default: ``error``, listing every
    unreadable file); ``skip_corrupt``: a file that passes that check but cannot be decoded yields None."""
    if split not in SPLITS:
        raise DatasetError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    if split == "pretrain" and (is_path_spec(spec) or CLASS_FILTER in spec or spec not in WITH_UNLABELED):
        split = "train"
    if CLASS_FILTER in spec and not is_path_spec(spec):
        base, _, text = spec.partition(CLASS_FILTER)
        data = load_dataset(base, split, root, download, None, None)
        return conform(keep_classes(data, parse_classes(text, spec), spec), channels, image_size)
    if spec.startswith("folder:"):
        path, stream = folder_spec(spec)
        policy = unreadable if unreadable is not None else UnreadableFiles("error")
        folder = load_folder(path, split, image_size, channels, policy, skip_corrupt)
        return folder if stream or skip_corrupt else folder.to_memory()
    if spec.startswith("npz:"):
        data = load_npz(Path(spec[len("npz:") :]), split)
    else:
        if spec not in DATASETS:
            raise UnknownNameError(unknown_dataset_message(spec, DATASETS.names()))
        loader = DATASETS.get(spec)
        if split == "all":
            data = TensorImages.concatenate([loader(s, root=root, download=download) for s in ("train", "test")], spec)
        else:
            data = loader(split, root=root, download=download)
    return conform(data, channels, image_size)


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
