"""(Not a sub-command: the leading underscore keeps it out of the CLI's discovery.)

Failures a user can meet that are not probcl's own errors, as one line each: the CLI's single error path.

``probcl`` (:func:`probcl.cli.main`) prints every :class:`~probcl.errors.ProbclError` as one line; this module
turns the other failures a user can meet into one, with what happened and what to do, instead of a traceback:
a training process of a multi-process (DDP) run that died or lost its connection, a full disk, a Ctrl-C, a SIGTERM.
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import errno

from probcl.core.io import NAME_TOO_LONG
from probcl.core.termination import EXIT_CODE as TERMINATED_EXIT_CODE
from probcl.core.termination import Terminated
from probcl.errors import ConfigError, ProbclError, RunError

# What torch.distributed's backends (gloo, NCCL) say when a peer process is gone.
PEER_LOST = (
    "connection reset by peer",
    "connection closed by peer",
    "broken pipe",
    "socket timeout",
    "connection refused",
    "nccl communicator was aborted",
    "ncclremoteerror",
)
RUN_AGAIN = "run the same command again"  # a command module's AFTER_A_STOP says more: what a rerun keeps


class InterruptedRun(ProbclError):
    """The user stopped the command (Ctrl-C)."""

    exit_code = 130
    kind = "interrupted"


class TerminatedRun(ProbclError):
    """Another process stopped the command (SIGTERM: ``kill``, a job scheduler, a container's stop)."""

    exit_code = TERMINATED_EXIT_CODE
    kind = "terminated"


def is_peer_lost(error: BaseException) -> bool:
    """A collective of a multi-process run failed because another process died or lost its connection."""
    return isinstance(error, RuntimeError) and any(s in str(error).lower() for s in PEER_LOST)


def as_probcl_error(error: BaseException, after_a_stop: str = RUN_AGAIN) -> ProbclError | None:
    """The one-line form of ``error``, or None when it is not a failure a user can meet (a bug: keep the traceback).
    ``after_a_stop``: what to do once the cause is dealt with, as the command declares it (its ``AFTER_A_STOP``:
    a pretraining run resumes, an evaluation keeps its finished suites, ...)."""
    if isinstance(error, ProbclError):
        return error
    if isinstance(error, KeyboardInterrupt):
        return InterruptedRun(f"stopped by the user; {after_a_stop}")
    if isinstance(error, Terminated):
        return TerminatedRun(f"stopped by SIGTERM; {after_a_stop}")
    if is_peer_lost(error):
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        detail = first.split("] ", 1)[-1].split(". This is typically", 1)[0]  # gloo's "[file:line] Read error ..."
        return RunError(
            f"a process of this multi-process run stopped or lost its connection ({detail}); "
            f"the files already written are intact: {after_a_stop}"
        )
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return RunError(f"the disk is full ({error}); free space, then {after_a_stop}")
    if isinstance(error, OSError) and error.errno == errno.ENAMETOOLONG:
        path = f"{str(error.filename)[:60]}..." if error.filename else "a path"
        return ConfigError(f"{path}: {NAME_TOO_LONG}; choose a shorter name")
    return None
