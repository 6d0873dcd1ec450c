"""One writer per run directory (:class:`RunLock`), and moving an earlier run's outputs aside."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from probcl.core.layout import RunPaths
from probcl.errors import RunError


def move_aside(paths: RunPaths) -> Path | None:
    """Move a previous run's outputs into ``RUN/previous-<timestamp>/``; returns that folder (None if nothing)."""
    outputs = [
        p
        for p in (
            paths.config,
            paths.checkpoints,
            paths.metrics,
            paths.metrics.with_suffix(".csv"),
            paths.eval,
            paths.report,
            paths.report.with_suffix(".html"),
            paths.plots,
            paths.root / "tensorboard",
            paths.root / "mlruns",
        )
        if p.exists()
    ]
    if not outputs:
        return None
    target = paths.root / f"previous-{time.strftime('%Y%m%d-%H%M%S')}"
    suffix = 1
    while target.exists():
        suffix += 1
        target = target.with_name(f"{target.name.split('.')[0]}.{suffix}")
    target.mkdir()
    for path in outputs:
        os.replace(path, target / path.name)
    return target


class RunLock:
    """One writer per run directory: ``RUN/.lock`` holds the owner's pid and host while a command writes.

    A second writer fails at once with :class:`RunError`; a lock left by a dead process on this
    host is taken over (and said so on stderr). Use as a context manager.
    """

    def __init__(self, root: str | Path, command: str) -> None:
        self.root, self.command = Path(root), command
        self.path = self.root / ".lock"
        self.held = False
        self.created_root = False

    def __enter__(self) -> RunLock:
        check_run_dir(self.root)
        self.created_root = not self.root.exists()
        self.root.mkdir(parents=True, exist_ok=True)
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "command": self.command}
        while True:
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._take_over_if_stale()
                continue
            except OSError as e:
                raise RunError(
                    f"cannot write in run directory {self.root} ({e.strerror}); "
                    f"make it writable or choose another --run-dir"
                ) from None
            with os.fdopen(fd, "w") as fh:
                json.dump(owner, fh)
            self.held = True
            return self

    def _take_over_if_stale(self) -> None:
        try:
            owner = json.loads(self.path.read_text())
            pid, host = int(owner["pid"]), str(owner["host"])
        except (OSError, ValueError, KeyError, TypeError):
            owner, pid, host = {}, -1, socket.gethostname()  # torn by a kill while it was written: stale
        if host != socket.gethostname() or _alive(pid):
            raise RunError(
                f"{self.root} is in use by `probcl {owner.get('command', '?')}` (pid {pid} on {host}); wait for "
                f"it to finish or choose another --run-dir. If that process is gone, delete {self.path}."
            )
        print(f"probcl: taking over {self.path}: its owner (pid {pid}) is no longer running", file=sys.stderr)
        self.path.unlink(missing_ok=True)

    def __exit__(self, *exc: object) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False
        if self.created_root:  # a command that failed before writing anything leaves no empty run dir
            try:
                self.root.rmdir()
            except OSError:
                pass  # not empty: the run wrote files


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def check_run_dir(root: Path) -> None:
    """Raise RunError when ``root`` exists but is not a directory."""
    if root.exists() and not root.is_dir():
        raise RunError(f"--run-dir {root} is an existing file, not a directory; choose another path")
