"""One writer per run directory (:class:`RunLock`), and moving an earlier run's outputs aside."""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import socket
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path

from probcl.core.io import broken_link_message, broken_link_on
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
    """One writer per run directory: ``RUN/.lock`` names its holder (pid, host, command) while a command writes.

    A second writer fails at once with :class:`~probcl.errors.RunInUseError`; a lock left by a dead process
    is taken over (and said so on stderr). Use as a context manager. ``filename`` names another lock in the
    same folder (a benchmark worker's claim on a cell, ``.claim``, is separate from the ``.lock`` its
    pretraining takes). With ``wait`` (a logger), a lock in use is waited for, polled every ``poll_s``
    seconds and said once, instead of failing.

    How it is kept (the invariant): *the holder is the one process that holds an exclusive* ``flock`` *on the
    file that the lock's name points at.* Every step keeps that true:

    - whoever finds the name missing creates it, empty (``O_CREAT``: a file already there is never replaced);
      creating it gives nothing: a process holds the lock only once it has the ``flock`` *and then* sees that
      the name still points at the file it locked (same device and inode). A process that got the ``flock`` on
      a file the name has left (a holder released it while this one waited) lets go and starts again;
    - only the holder removes the name, when it releases, *before* it lets go of the ``flock``. So while
      a holder holds, the name keeps pointing at its file (nobody else may remove it), and two processes
      that each saw "the name points at the file I have locked" hold locks on the same file, which ``flock``
      excludes; a lock on a file the name has left is never mistaken for the lock;
    - a holder that dies lets go of its ``flock`` with its last open descriptor (the kernel's doing, so a
      kill cannot leave the lock held): the next process gets the ``flock`` on the same file, finds the dead
      process named in it and takes over by writing its own name there. Nothing is deleted to take over, so
      no process can delete a lock that another has just made. A forked child closes its copy of the
      descriptor at once (a DataLoader worker does not hold its parent's lock);
    - a name in the file that does not match the ``flock``, a live process on this host (a lock written by
      a probcl before file locks) or any process of another host (whose liveness cannot be checked here),
      is respected: in use, as before.

    The run directory itself may vanish between two steps (a holder that created it removes it empty when
    it is done, with the parents it created): a step that finds it gone starts again; a run directory that is
    a file is an error.
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
        self.created_dirs: list[Path] = []  # the run directory and the parents it made, deepest first
        self._fd: int | None = None
        self._holder = 0  # the pid that holds it (a forked child's copy of this object does not)

    def __enter__(self) -> RunLock:
        check_run_dir(self.root)
        owner = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": self.command})
        waited = False
        while True:
            fd = self._open()
            if fd is None:
                continue  # the run directory was removed by the previous holder: make it again
            try:
                self._lock(fd)
            except RunInUseError as e:
                os.close(fd)
                if self.wait is None:
                    raise
                if not waited:
                    self.wait(f"probcl: waiting for {e.owner} to release {self.path}")
                waited = True
                time.sleep(self.poll_s)
                continue
            except _NotTheLock:
                os.close(fd)
                continue  # released while we waited for it: the name now points at another file, or none
            except BaseException:
                os.close(fd)
                raise
            self._fd, self._holder, self.held = fd, os.getpid(), True
            _HELD.add(fd)
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, owner.encode(), 0)
            except BaseException:  # a full disk: let go as a holder does (the name, the flock, the folders made)
                self.__exit__()
                raise
            return self

    def _open(self) -> int | None:
        """The lock file's descriptor (created empty when missing); None when the run directory vanished."""
        missing = list(itertools.takewhile(lambda d: not d.exists(), (self.root, *self.root.parents)))
        try:
            self.root.mkdir(parents=True)
            self.created_dirs = missing
        except FileExistsError:  # there already, or a broken symbolic link on the way (os.open then never succeeds)
            broken = broken_link_on(self.root)
            if broken is not None:
                raise RunError(
                    f"cannot make run directory {self.root}: {broken_link_message(broken)}; create its target or "
                    f"choose another --run-dir"
                ) from None
        except OSError as e:
            raise self._unwritable(e) from None
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:
            return None
        except OSError as e:
            check_run_dir(self.root)
            raise self._unwritable(e) from None

    def _lock(self, fd: int) -> None:
        """Take the ``flock`` of ``fd`` and check that it is the lock and free: returns when this process holds
        it (a dead holder's is taken over, and said so); raises RunInUseError when another holds it, and
        _NotTheLock when the name no longer points at ``fd``'s file."""
        try:
            _flock_or_orphan(fd)
        except BlockingIOError:
            if not self._names(fd):
                raise _NotTheLock() from None
            raise self._in_use(_read_owner(fd)) from None
        except OSError as e:
            raise RunError(
                f"cannot lock {self.path} ({e.strerror}): its filesystem has no file locks; "
                f"choose a --run-dir on a local disk"
            ) from None
        if not self._names(fd):
            raise _NotTheLock()
        found = _read_owner(fd)
        if found is None:
            return  # empty: made just now and never held, or its holder died before it wrote its name
        pid, host = found["pid"], found["host"]
        if host != socket.gethostname() or _alive(pid):
            raise self._in_use(found)
        print(f"probcl: taking over {self.path}: its owner (pid {pid}) is no longer running", file=sys.stderr)

    def _names(self, fd: int) -> bool:
        """Whether the lock's name points at the file open as ``fd``."""
        try:
            named = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (named.st_dev, named.st_ino) == (mine.st_dev, mine.st_ino)

    def _in_use(self, owner: dict | None) -> RunInUseError:
        owner = owner or {}
        holder = f"`probcl {owner.get('command', '?')}` (pid {owner.get('pid', '?')} on {owner.get('host', '?')})"
        if owner.get("host") == socket.gethostname() and not _alive(int(owner.get("pid", -1))):
            return RunInUseError(
                f"{self.root} is in use: {holder} is no longer running, but a process it started still holds its "
                f"lock (for example a data-loading worker); stop that process, or choose another --run-dir.",
                holder,
            )
        return RunInUseError(
            f"{self.root} is in use by {holder}; wait for it to finish or choose another --run-dir. "
            f"If that process is gone, delete {self.path}.",
            holder,
        )

    def _unwritable(self, e: OSError) -> RunError:
        return RunError(
            f"cannot write in run directory {self.root} ({e.strerror}); make it writable or choose another path"
        )

    def __exit__(self, *exc: object) -> None:
        if self.held and self._fd is not None and self._holder == os.getpid():
            self.path.unlink(missing_ok=True)  # first, while the flock is still ours (see the invariant)
            _HELD.discard(self._fd)
            os.close(self._fd)
            self._fd, self.held = None, False
        # a command that failed before writing anything leaves no empty run dir, nor the parents made for it
        for made in self.created_dirs:
            try:
                made.rmdir()
            except OSError:
                break  # not empty: the run wrote files (or another process's lock or run is in it)


class _NotTheLock(Exception):
    """The ``flock`` was taken on a file that the lock's name no longer points at."""


_HELD: set[int] = set()  # descriptors of the locks this process holds


def _close_inherited_locks() -> None:
    """In a forked child: close the copies of the parent's lock descriptors, so that the locks live and die
    with the parent (closing a copy does not release the parent's ``flock``; only its own last close does)."""
    for fd in _HELD:
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD.clear()


os.register_at_fork(after_in_child=_close_inherited_locks)


ORPHAN_GRACE_S = 2.0  # how long a dead holder's forked child may take to close its copy of the lock


def _flock_or_orphan(fd: int) -> None:
    """Take the ``flock`` of ``fd`` without blocking; raises BlockingIOError when it is held. One case waits a
    little: the owner named in the file is dead (on this host) yet the ``flock`` is held. That is a child it
    forked just before it died, which holds a copy of the descriptor until its fork hook closes it
    (microseconds, more on a loaded machine); waiting ``ORPHAN_GRACE_S`` turns that race into a takeover."""
    deadline = time.monotonic() + ORPHAN_GRACE_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            owner = _read_owner(fd)
            orphaned = owner is not None and owner["host"] == socket.gethostname() and not _alive(owner["pid"])
            if not orphaned or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _read_owner(fd: int) -> dict | None:
    """The owner written in the lock file open as ``fd``: None when empty; pid -1 when unreadable (torn by a
    kill while it was written)."""
    text = os.pread(fd, 4096, 0)
    if not text:
        return None
    try:
        owner = json.loads(text)
        return {"pid": int(owner["pid"]), "host": str(owner["host"]), "command": str(owner.get("command", "?"))}
    except (ValueError, KeyError, TypeError):
        return {"pid": -1, "host": socket.gethostname(), "command": "?"}


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
    """Raise RunError when ``root`` exists but is not a directory (one ``stat``: a folder that another process
    removes or makes meanwhile is either there or not, never "a file")."""
    try:
        mode = os.stat(root).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return  # missing (or under a file: making it will say so)
    if not stat.S_ISDIR(mode):
        raise RunError(f"the output folder {root} is an existing file, not a folder; choose another path")
