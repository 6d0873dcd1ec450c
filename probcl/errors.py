"""The errors probcl raises for bad input and failed runs; ``probcl`` (cli.main) turns each into one line.

Library code raises these (never a bare ValueError/TypeError for user input), so that a caller
can catch :class:`ProbclError` and the CLI can print the message without a traceback.
"""

from __future__ import annotations


class ProbclError(Exception):
    """Base of every expected probcl failure; the message names the problem and the fix."""

    exit_code: int = 1
    kind: str = "error"


class ConfigError(ProbclError, ValueError):
    """An invalid configuration value, option or argument; the message names the key and the valid choices.
    ``keys`` are the dotted config keys it is about (``method_args.temperature``) where the checking code knows
    them (:func:`probcl.config.from_dict`), for a caller that adds advice about those keys."""

    exit_code = 2
    kind = "config error"

    def __init__(self, message: str, *, keys: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.keys = keys


class UnknownNameError(ConfigError):
    """A name that is not in a registry; the message lists the valid choices."""


class DatasetError(ProbclError):
    """A dataset that cannot be found or read (missing files, bad arrays, corrupt images)."""


class RunError(ProbclError):
    """A run directory or checkpoint that does not exist, cannot be read or is in use."""


class StoppedBySignal(RunError):
    """A run stopped on request (SIGTERM, Ctrl-C) after saving its state; it exits with 128 + the signal's number,
    as a shell reports a process the signal ended (130 for Ctrl-C, 143 for SIGTERM), so that a job script can
    tell a stop to resume from a failure."""

    kind = "interrupted"

    def __init__(self, message: str, signal_number: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signal_number


class RunInUseError(RunError):
    """A run directory that another live process (or a process on another host) is writing in."""

    def __init__(self, message: str, owner: str) -> None:
        super().__init__(message)
        self.owner = owner  # "`probcl CMD` (pid P on HOST)": who holds it, for a caller that waits or moves on


class TrainingDivergedError(ProbclError):
    """The loss (or an energy/gradient a method watches) became non-finite or exploded."""
