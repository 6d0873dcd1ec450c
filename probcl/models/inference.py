"""The public inference entry point: ``model.embed(images)`` without autograd, in batches, on the model's device.

``images`` is whatever a user has: a uint8 (0..255) or float ([0, 1]) tensor (N, C, H, W) or one image
(C, H, W), a NumPy array, a PIL image, an image file path, or a list of these. :func:`as_image_batch` is the
one place that turns them into a batch for the model's input: PIL images and files are converted to its
channels (L or RGB) and resized to its image size exactly as image folders are (``folder:`` datasets);
tensors must already have its channels.

NumPy arrays (uint8 0..255 or float in [0, 1]) are channels-last, as PIL, imageio, OpenCV and scikit-learn
hold images: (N, H, W, C) or (N, H, W) (gray) is a batch, (H, W, C) or (H, W) one image; a 3-D array is one
image when its last axis has 1, 3 or 4 entries (gray, RGB, RGBA), else N gray images. An array that already
has the model's channels and size is used as it is (float precision kept); any other is converted to its
channels and resized like an image file. A channels-first (N, C, H, W) array goes through
``torch.from_numpy(array)``.

:class:`Inference` gives a model (a probcl method, or an encoder loaded from ``probcl export``) its
public ``embed``: ``batch_size`` images at a time under ``torch.inference_mode``, through the model's
differentiable one-batch hook ``embed_batch`` (what training, adversarial attacks and Lipschitz
estimates take gradients through). Results are ordinary tensors on the model's device, without
autograd history.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import torch

from probcl.config import INFERENCE_BATCH_SIZE
from probcl.data.decoding import decode_image, pil_to_uint8
from probcl.data.info import DataInfo
from probcl.errors import ConfigError, DatasetError

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

    from probcl.data.augment import Normalizer  # the annotation only: views (kornia) stay unloaded

    OneImage: TypeAlias = torch.Tensor | np.ndarray | PILImage | str | os.PathLike[str]
    ImageInput: TypeAlias = OneImage | Sequence[OneImage]

RANGE_TOLERANCE = 1e-4  # float images may exceed [0, 1] by this much (rounding)
CHANNEL_COUNTS = (1, 3, 4)  # the last axis of a channels-last NumPy image: gray, RGB, RGBA
NO_IMAGES = "no images given: pass a tensor, a NumPy array, a PIL image, an image file, or a non-empty list"


def as_image_batch(images: ImageInput, channels: int, image_size: int) -> torch.Tensor:
    """``images`` (see the module doc) as one (N, C, H, W) tensor, uint8 or float in [0, 1], for a model
    taking ``channels``-channel ``image_size`` x ``image_size`` input; one clear error for anything else."""
    from PIL.Image import Image

    if isinstance(images, torch.Tensor):
        return _checked_tensor(images, channels)
    if isinstance(images, np.ndarray):
        return _from_numpy(channels_last(images), channels, image_size)
    if isinstance(images, Image):
        return pil_to_uint8(images, image_size, channels)[None]
    if isinstance(images, (str, os.PathLike)):
        return _read_file(Path(images), image_size, channels)
    if isinstance(images, Sequence):
        if not images:
            raise ConfigError(NO_IMAGES)
        parts = [as_image_batch(item, channels, image_size) for item in images]
        if len({p.dtype for p in parts}) > 1:  # uint8 next to float: everything on the [0, 1] scale
            parts = [p.float() / 255.0 if p.dtype == torch.uint8 else p.float() for p in parts]
        sizes = {tuple(p.shape[1:]) for p in parts}
        if len(sizes) > 1:
            raise ConfigError(
                f"the images differ in size ({', '.join(f'{c}x{h}x{w}' for c, h, w in sorted(sizes))}); "
                f"pass same-size tensors, or PIL images / files (resized to the model's "
                f"{image_size}x{image_size})"
            )
        return torch.cat(parts)
    raise ConfigError(
        f"cannot read images of type {type(images).__name__}: pass a uint8 or [0, 1] float tensor "
        f"(N, C, H, W) or NumPy array (N, H, W[, C]), a PIL image, an image file path, or a list of these"
    )


def channels_last(array: np.ndarray) -> np.ndarray:
    """A NumPy image or batch (see the module doc) as an (N, H, W, C) view, without copying."""
    if array.ndim == 2 or (array.ndim == 3 and array.shape[-1] in CHANNEL_COUNTS):
        array = array[None]  # one image
    if array.ndim == 3:
        array = array[..., None]  # N gray images
    if array.ndim != 4:
        raise ConfigError(
            f"a NumPy array of images must be (N, H, W, C), (N, H, W), (H, W, C) or (H, W), got shape {array.shape}"
        )
    if array.shape[-1] not in CHANNEL_COUNTS:
        raise ConfigError(
            f"a NumPy array of images is channels-last (N, H, W, C) with C = 1, 3 or 4, got shape {array.shape}; "
            f"a channels-first (N, C, H, W) array: pass torch.from_numpy(array)"
        )
    return array


def _from_numpy(batch: np.ndarray, channels: int, image_size: int) -> torch.Tensor:
    """An (N, H, W, C) uint8 or [0, 1] float array as the model's (N, channels, S, S) batch."""
    if batch.dtype != np.uint8:
        if not np.issubdtype(batch.dtype, np.floating):
            raise ConfigError(f"NumPy images of dtype {batch.dtype}: pass uint8 (0..255) or float in [0, 1]")
        batch = batch.astype(np.float32, copy=False)
        _check_range(float(batch.min(initial=0.0)), float(batch.max(initial=0.0)))
    if batch.shape[1:] == (image_size, image_size, channels):  # the model's input already: kept exact
        return torch.from_numpy(np.ascontiguousarray(batch)).permute(0, 3, 1, 2)
    if not len(batch):
        return torch.empty((0, channels, image_size, image_size), dtype=torch.uint8)
    from PIL import Image

    if batch.dtype != np.uint8:  # what an image file holds
        batch = np.round(np.clip(batch, 0.0, 1.0) * 255.0).astype(np.uint8)
    images = [Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image) for image in batch]
    return torch.stack([pil_to_uint8(image, image_size, channels) for image in images])


def _checked_tensor(images: torch.Tensor, channels: int) -> torch.Tensor:
    given = f"shape {tuple(images.shape)}" + (", read as one (C, H, W) image" if images.dim() == 3 else "")
    if images.dim() == 3:
        images = images[None]
    if images.dim() != 4:
        raise ConfigError(f"images must be (N, C, H, W) or one (C, H, W) image, got {given}")
    if images.shape[1] != channels:
        raise ConfigError(
            f"images have {images.shape[1]} channels ({given}); the model takes "
            f"{channels}: convert them first (or pass PIL images / files, converted for you)"
        )
    if images.dtype != torch.uint8 and not images.is_floating_point():
        raise ConfigError(f"images of dtype {images.dtype}: pass uint8 (0..255) or float in [0, 1]")
    if images.is_floating_point() and images.numel():
        _check_range(images.min().item(), images.max().item())
    return images


def _check_range(low: float, high: float) -> None:
    if low < -RANGE_TOLERANCE or high > 1 + RANGE_TOLERANCE:
        raise ConfigError(
            f"float images must be in [0, 1], got values in [{low:.3g}, {high:.3g}]; pass uint8 "
            f"0..255 or divide by 255 (the model normalises its input itself)"
        )


def _read_file(path: Path, image_size: int, channels: int) -> torch.Tensor:
    if path.is_dir():
        raise DatasetError(
            f"{path} is a folder, not an image file: pass its files (or score the folder with "
            f"`probcl score RUN --dataset folder:{path}`)"
        )
    if not path.exists():
        raise DatasetError(f"image file {path} does not exist")
    return decode_image(path, image_size, channels)[None]


def image_chunks(images: ImageInput, batch_size: int) -> Iterator[ImageInput]:
    """``images`` in consecutive pieces of at most ``batch_size`` images (a tensor's or array's slices, a list's
    sub-lists; a single image or file is one piece); files are read only when their piece is."""
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    if isinstance(images, np.ndarray):
        images = channels_last(images)
    if isinstance(images, torch.Tensor | np.ndarray) and images.ndim == 4:
        for start in range(0, max(len(images), 1), batch_size):
            yield images[start : start + batch_size]
    elif isinstance(images, Sequence) and not isinstance(images, str):
        if not images:
            raise ConfigError(NO_IMAGES)
        for start in range(0, len(images), batch_size):
            yield images[start : start + batch_size]
    else:
        yield images


class Inference(ABC):
    """The public, no-grad ``embed`` of a model that implements the differentiable :meth:`embed_batch`."""

    data_info: DataInfo  # the model's input: channels, image size, normalisation
    normalizer: Normalizer  # its buffers live on the model's device

    @abstractmethod
    def embed_batch(self, images: torch.Tensor) -> torch.Tensor:
        """Features (N, d) of one uint8 or [0, 1] float batch (N, C, H, W), with autograd."""

    def embed(self, images: ImageInput, batch_size: int = INFERENCE_BATCH_SIZE) -> torch.Tensor:
        """Features (N, d) of ``images`` (tensor, NumPy array, PIL image, file path, or a list of them; see
        :func:`as_image_batch`), ``batch_size`` at a time without autograd, on the model's device."""
        return self.infer(self.embed_batch, images, batch_size)

    def infer(
        self, fn: Callable[[torch.Tensor], Any], images: ImageInput, batch_size: int = INFERENCE_BATCH_SIZE
    ) -> torch.Tensor:
        """``fn`` (one tensor batch on the model's device -> (n, ...) tensor) over ``images`` in batches,
        under ``torch.inference_mode``; the concatenated result has no autograd history."""
        device = self.normalizer.mean.device
        channels, size = self.data_info.channels, self.data_info.image_size
        parts = []
        with torch.inference_mode():
            for chunk in image_chunks(images, batch_size):
                parts.append(fn(as_image_batch(chunk, channels, size).to(device)))
        return torch.cat(parts)  # outside inference mode: an ordinary tensor that later autograd code may use
