"""SIGTERM as an exception: a terminated command unwinds like a Ctrl-C instead of dying where it stands.

Python's default for SIGTERM ends the process at once: no ``finally`` runs, so a run folder keeps its ``.lock``
and an atomic write leaves its temporary file behind. :func:`sigterm_raises` (around every ``probcl`` command)
raises :class:`Terminated` instead, so every clean-up runs and the command exits 143 with one line.

Pretraining stops at a safe point instead: Lightning's signal connector takes SIGTERM while ``fit`` runs, asks the
loop to stop after the current step and saves the state (``probcl.runs.resume.GracefulStop``). It also calls the
handler it found, this one; inside :func:`sigterm_deferred` that handler returns without raising, so the
graceful stop is not cut short.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

EXIT_CODE = 128 + signal.SIGTERM  # 143, what a shell reports for a process SIGTERM ended


class Terminated(BaseException):
    """SIGTERM arrived. A BaseException, as KeyboardInterrupt is, so that ``except Exception`` does not swallow it."""


_deferring = 0  # how many sigterm_deferred blocks are open
_installed_by = 0  # the process that installed the handler; a forked child (a data-loading worker) dies as before


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    if os.getpid() != _installed_by:  # a child inherited the handler: the default action, as if none were set
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    if _deferring == 0:
        raise Terminated("SIGTERM")


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Inside this block SIGTERM raises :class:`Terminated` in the main thread; the previous handler is back
    afterwards. A no-op outside the main thread (Python installs handlers only there) and where SIGTERM is
    ignored (a supervising process's choice, kept)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        yield
        return
    global _installed_by
    _installed_by = os.getpid()
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def sigterm_deferred() -> Iterator[None]:
    """Inside this block SIGTERM does not raise: the code running here stops at its own safe point (it has its
    own SIGTERM handler, such as Lightning's, which calls this module's after its own)."""
    global _deferring
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
