"""``folder:PATH``: a folder of image files, streamed (decoded per batch in DataLoader workers).

Class sub-folders give labels; a flat folder is unlabeled. ``train/`` and ``test/`` (or ``val/``) sub-folders
are the splits where present, otherwise a seeded 80/20 hold-out. Every file is checked once before any is
decoded (:mod:`probcl.data.unreadable`), and one channel count holds for every image of the folder
(:func:`channels_of`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from probcl.data.decoding import CorruptImageError, decode_image
from probcl.data.sources import ImageSource, holdout_split
from probcl.data.specs import HOLDOUT_FRACTION, IMAGE_SUFFIXES, Split
from probcl.data.unreadable import FolderScan, UnreadableFiles
from probcl.errors import DatasetError

DEFAULT_IMAGE_SIZE = 64  # folders have no native size: images are resized to data.image_size, this by default


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

    With ``skip_corrupt`` a file that passed the up-front check but cannot be decoded yields ``image=None``
    instead of raising, for consumers that skip such items (see :func:`~probcl.data.loaders.collate_skip_corrupt`).
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
        channels_note: str = "",
    ) -> None:
        self.paths = paths
        self._labels = labels
        self.classes = classes
        self.class_names = classes or None
        self.name = name
        self.image_size = image_size
        self.channels = channels
        self.num_classes = len(classes) or None
        self.skip_corrupt = skip_corrupt
        self.channels_note = channels_note

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
            self.channels_note,
        )


def channels_of(scan: FolderScan) -> tuple[int, str]:
    """The channel count of a folder whose channels are not given (``data.channels: auto``), and why: RGB when
    any readable image is colour (gray images become RGB without losing anything; colour ones would lose their
    colour in gray), gray when every image is gray."""
    if scan.colour:
        return 3, f"auto: {scan.colour} of the folder's {scan.readable} images are colour, so every image is RGB"
    return 1, f"auto: all of the folder's {scan.readable} images are gray"


def load_folder(
    path: Path,
    split: Split,
    image_size: int | None,
    channels: int | None,
    unreadable: UnreadableFiles,
    skip_corrupt: bool = False,
) -> FolderImages:
    """The ``split`` of the folder ``path``: its readable image files (the whole folder is checked once per
    ``unreadable`` policy), labeled by class sub-folder, converted to ``channels`` (None: :func:`channels_of`)."""
    if path.is_file():
        raise DatasetError(
            f"folder:{path} is a file, not a folder: `folder:` takes a folder of images (class sub-folders, or a flat "
            f"folder); pass the folder that holds it (folder:{path.parent}), or load single files in Python "
            f"(probcl.load(RUN).embed([...]))"
        )
    if not path.is_dir():
        raise DatasetError(f"folder {path} does not exist; check the path after `folder:`")
    test_dir = next((path / name for name in ("test", "val") if (path / name).is_dir()), None)
    has_splits = (path / "train").is_dir() and test_dir is not None
    bases = [path / "train", test_dir] if has_splits and test_dir is not None else [path]
    listed = {base: _image_files(base) for base in bases}
    wanted = {"train": bases[:1], "test": bases[1:]}.get(split, bases) if has_splits else bases
    found = [(base, rel) for base in wanted for rel in listed[base]]
    if not found:
        raise DatasetError(f"no images ({', '.join(sorted(IMAGE_SUFFIXES))}) found under {wanted[0]}")
    scan = unreadable.scan(path, [os.path.join(base, *rel) for base in bases for rel in listed[base]])
    labeled = all(len(rel) == 2 for _, rel in found)  # every image in a class sub-folder
    classes = sorted({rel[0] for _, rel in found}) if labeled else []
    index = {name: i for i, name in enumerate(classes)}
    labels = torch.tensor([index[rel[0]] for _, rel in found], dtype=torch.long) if labeled else None
    files = [os.path.join(base, *rel) for base, rel in found]
    in_split = range(len(found)) if has_splits else holdout_split(len(found), split).tolist()
    keep = [i for i in in_split if files[i] not in scan.unreadable]
    if not keep:
        few = "too few images" if not in_split else "too few readable images"
        raise DatasetError(
            f"folder {path} holds {few} for a {split} split (the held-out test share is "
            f"{HOLDOUT_FRACTION:.0%}); add images, or make train/ and test/ sub-folders"
        )
    note = ""
    if channels is None:
        channels, note = channels_of(scan)
    return FolderImages(
        PathTable.of([files[i] for i in keep]),
        None if labels is None else labels[keep],
        classes,
        f"folder:{path}",
        image_size or DEFAULT_IMAGE_SIZE,
        channels,
        skip_corrupt,
        note,
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
