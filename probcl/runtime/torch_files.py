"""Writing tensor files (checkpoints, caches, exports) atomically, with the disk's own error when a write fails."""

from __future__ import annotations

import io
import os
from typing import Any

import torch

from probcl.core.io import atomic_write


def atomic_torch_save(path: str | os.PathLike, obj: Any) -> None:
    """``torch.save(obj)`` to ``path`` atomically. The bytes are serialised in memory first, then written: torch's
    zip writer, writing to the file itself, turns a failed write (a full disk) into a RuntimeError that no longer
    says why, or aborts the process from its destructor; a plain write raises the OSError, which
    :func:`~probcl.core.io.atomic_write` turns into one line naming the file and the fix."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    atomic_write(path, lambda fh: fh.write(buffer.getbuffer()))
