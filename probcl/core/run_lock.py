"""One writer per run directory (:class:`RunLock`), and moving an earlier run's outputs aside."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from probcl.core.layout import RunPaths
from probcl.errors import RunError, RunInUseError


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

    A second writer fails at once with :class:`~probcl.errors.RunInUseError`; a lock left by a dead
    process on this host is taken over (and said so on stderr). Use as a context manager. ``filename``
    names another lock in the same folder (a benchmark worker's claim on a cell, ``.claim``, is separate
    from the ``.lock`` its pretraining takes). With ``wait`` (a logger), a lock in use is waited for,
    polled every ``poll_s`` seconds and said once, instead of failing.
    """

    def __init__(
        self,
        root: str | Path,
        command: str,
        filename: str = ".lock",
        wait: Callable[[str], None] | None = None,
        poll_s: float = 2.0,
    ) -> None:
        self.root, self.command = Path(root), command
        self.path = self.root / filename
        self.wait, self.poll_s = wait, poll_s
        self.held = False
        self.created_root = False

    def __enter__(self) -> RunLock:
        check_run_dir(self.root)
        self.created_root = not self.root.exists()
        owner = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": self.command})
        waited = False
        while True:
            try:
                self.root.mkdir(parents=True, exist_ok=True)  # again: a holder that created it removes it empty
                created = self._create(owner)
            except FileNotFoundError:
                continue  # removed by the previous holder between the two lines above
            except OSError as e:
                raise RunError(
                    f"cannot write in run directory {self.root} ({e.strerror}); "
                    f"make it writable or choose another --run-dir"
                ) from None
            if created:
                self.held = True
                return self
            try:
                self._take_over_if_stale()
            except RunInUseError as e:
                if self.wait is None:
                    raise
                if not waited:
                    self.wait(f"probcl: waiting for {e.owner} to release {self.path}")
                waited = True
                time.sleep(self.poll_s)

    def _create(self, owner: str) -> bool:
        """Create the lock holding ``owner`` in one step, False if it exists: a hard link to a finished
        temporary file, so that no other process reads it half-written and takes it for a dead one's
        (exclusive create, then write, where the filesystem has no hard links)."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        with os.fdopen(os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o644), "w") as fh:
            fh.write(owner)
        try:
            os.link(tmp, self.path)
            return True
        except FileExistsError:
            return False
        except OSError:  # no hard links here
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "w") as fh:
                fh.write(owner)
            return True
        finally:
            tmp.unlink(missing_ok=True)

    def _take_over_if_stale(self) -> None:
        try:
            owner = json.loads(self.path.read_text())
            pid, host = int(owner["pid"]), str(owner["host"])
        except (OSError, ValueError, KeyError, TypeError):
            owner, pid, host = {}, -1, socket.gethostname()  # torn by a kill while it was written: stale
        if host != socket.gethostname() or _alive(pid):
            holder = f"`probcl {owner.get('command', '?')}` (pid {pid} on {host})"
            raise RunInUseError(
                f"{self.root} is in use by {holder}; wait for it to finish or choose another --run-dir. "
                f"If that process is gone, delete {self.path}.",
                holder,
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
