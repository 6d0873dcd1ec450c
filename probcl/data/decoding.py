"""Image files -> uint8 tensors, the same way for every file: 16/32-bit pixels scaled to 8 bits, converted
to gray (L) or RGB, resized (bilinear) to a square size; and the cheap check that tells a readable file from
one that is not before any is decoded (:func:`check_image`).

Channel conversion is PIL's ``convert``: colour to gray by ITU-R 601-2 luma, gray to RGB by repeating it, and an
alpha channel (RGBA, LA, transparent palettes) is **dropped**, not composited: the colour stored under a
transparent pixel is what the model sees. Composite onto the background you want before training if it matters.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from probcl.errors import DatasetError

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

# PIL modes holding one gray channel (possibly with alpha, or 16/32-bit); every other mode is colour
GRAY_MODES = frozenset({"1", "L", "LA", "La", "I", "I;16", "I;16L", "I;16B", "I;16N", "F"})


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


def check_image(path: str | Path) -> str:
    """The PIL mode of the image file ``path``, read from its header; raises CorruptImageError if the file is no
    image PIL can open. Formats with checksums are checked through to their end without decoding the pixels
    (PNG: every chunk's CRC, so a truncated or damaged PNG fails here); for the others (JPEG, ...) only the header
    is read, so damage inside their pixel data shows when the file is decoded."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            mode = img.mode
            img.verify()
    except Image.DecompressionBombError as e:
        raise CorruptImageError(f"image {path} is too large to decode safely ({e}); downscale it first") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError) as e:
        raise CorruptImageError(f"cannot read image {path}: {_reason(e, path)}") from None
    return mode


def is_colour(mode: str) -> bool:
    """True for a PIL mode with colour (RGB, RGBA, palette, CMYK, YCbCr, ...), False for gray ones."""
    return mode not in GRAY_MODES


def decode_image(path: Path, image_size: int, channels: int) -> torch.Tensor:
    """Read an image file as a uint8 (C, S, S) tensor, or raise CorruptImageError naming the file."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as file:
            return pil_to_uint8(file, image_size, channels)
    except Image.DecompressionBombError as e:
        raise CorruptImageError(f"image {path} is too large to decode safely ({e}); downscale it first") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError) as e:
        raise CorruptImageError(f"cannot read image {path}: {_reason(e, path)}. Remove or replace this file") from None


def pil_to_uint8(img: PILImage, image_size: int, channels: int) -> torch.Tensor:
    """A PIL image as a uint8 (C, S, S) tensor: 16/32-bit pixels scaled to 8 bits (never clipped), converted
    to ``channels`` (L or RGB; alpha dropped) and resized (bilinear) to ``image_size``, the same for every file."""
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


def _reason(error: BaseException, path: str | Path) -> str:
    """An exception's message on one line, without the file's name (the message gives it) or a final full stop."""
    text = str(error).replace(f"'{path}'", "").replace(str(path), "")
    return " ".join(text.split()).rstrip(".") or type(error).__name__
