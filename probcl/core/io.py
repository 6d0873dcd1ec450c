"""Atomic file writes: write to a temporary file in the same folder, then rename over the target."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from probcl.errors import RunError

_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], object]) -> None:
    """Call ``write(fh)`` on a temporary file and rename it to ``path`` only if it succeeded."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise write_error(path, e) from None
        raise


def write_error(path: Path, error: OSError) -> RunError:
    """The one-line error for a failed write (disk full, read-only folder, ...)."""
    return RunError(
        f"cannot write {path}: {error.strerror or error}. Nothing was lost: the previous {path.name} "
        f"(if any) is intact; free disk space or fix permissions and run the command again "
        f"(pretraining resumes from its last checkpoint)"
    )


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write(path, lambda fh: fh.write(text.encode()))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=float) + "\n")


def read_json(path: str | os.PathLike, default: Any = None) -> Any:
    path = Path(path)
    if not path.exists():
        return default
    return json.loads(path.read_text())
