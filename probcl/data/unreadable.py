"""One policy for image files that cannot be read, in ``pretrain``, ``evaluate`` and ``score`` alike.

A folder's files are checked once, up front, before any is decoded (:func:`~probcl.data.decoding.check_image`:
the header, and checksums where the format has them). With ``skip`` the unreadable files are left out, and
the command prints ONE line with their count and the path of a list file (path and reason per line); with
``error`` it stops before any work with one error that lists every unreadable file found, so that one run
shows them all (never one re-run per bad file).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from probcl.config import OnUnreadable
from probcl.core.io import atomic_write_text
from probcl.core.progress import progress
from probcl.data.decoding import CorruptImageError, check_image, is_colour
from probcl.errors import ConfigError, DatasetError

ON_UNREADABLE_OPTION = "--on-unreadable"  # the policy's option of `probcl evaluate` and `probcl score`
SCAN_PROGRESS = 10_000  # folders of more files show a progress bar while they are checked


@dataclass(frozen=True)
class FolderScan:
    """What the up-front check found in one folder: the unreadable files (path -> reason) and how many of the
    readable ones are colour."""

    files: int
    unreadable: dict[str, str]
    colour: int

    @property
    def readable(self) -> int:
        """How many of the folder's files can be read."""
        return self.files - len(self.unreadable)


@dataclass
class UnreadableFiles:
    """The policy for unreadable image files (``skip`` or ``error``) and every such file one command met.

    One object per command: each folder is checked once (:meth:`scan` caches per folder), whatever splits
    the command loads. ``setting`` is how the user changes the policy, as the error message names it.
    """

    policy: OnUnreadable = "skip"
    setting: str = "--data.on_unreadable"
    found: dict[str, str] = field(default_factory=dict)  # path -> reason, in the order met
    _scans: dict[str, FolderScan] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.policy not in ("skip", "error"):
            raise ConfigError(f"{self.setting} must be skip or error, got {self.policy!r}")

    def scan(self, folder: Path, paths: Sequence[str]) -> FolderScan:
        """Check every file of ``folder`` (``paths``: all of its image files) once; with ``error``, raise one
        DatasetError listing every unreadable file; with ``skip``, remember them (:attr:`found`)."""
        key = str(folder)
        if key not in self._scans:
            unreadable, colour = {}, 0
            shown = progress(paths, f"checking the images of {folder}") if len(paths) > SCAN_PROGRESS else paths
            for path in shown:
                try:
                    colour += is_colour(check_image(path))
                except CorruptImageError as e:
                    unreadable[str(path)] = str(e).removeprefix(f"cannot read image {path}: ")
            self._scans[key] = FolderScan(len(paths), unreadable, colour)
        result = self._scans[key]
        if result.unreadable and (self.policy == "error" or not result.readable):
            raise self.error(folder, result)
        self.found.update(result.unreadable)
        return result

    def add(self, path: str, reason: str) -> None:
        """Record a file that passed the check but failed when decoded (a consumer that skips such items)."""
        self.found[path] = reason

    def error(self, folder: Path, result: FolderScan) -> DatasetError:
        """One error naming every unreadable file of ``folder`` and the fix."""
        listed = "; ".join(f"{path} ({reason})" for path, reason in result.unreadable.items())
        if not result.readable:
            return DatasetError(
                f"none of the {result.files} image files under {folder} can be read; cannot read image {listed}. "
                f"Replace them with readable image files"
            )
        return DatasetError(
            f"{len(result.unreadable)} of the {result.files} image files under {folder} cannot be read: {listed}. "
            f"Remove or replace them, or leave them out with {self.setting}=skip"
        )

    def report(self, list_file: Path | None) -> str | None:
        """Write the files met so far to ``list_file`` (atomically; a stale list from an earlier call of the same
        command is removed when there are none) and print ONE line on stderr; returns that line."""
        if not self.found:
            if list_file is not None:
                list_file.unlink(missing_ok=True)
            return None
        count = len(self.found)
        if list_file is not None:
            atomic_write_text(list_file, "".join(f"{path}\t{reason}\n" for path, reason in self.found.items()))
            where = f"listed in {list_file}"
        else:
            where = "namely " + ", ".join(self.found)
        line = (
            f"probcl: skipped {count} unreadable image file{'s' if count != 1 else ''} ({self.setting}=skip), {where}"
        )
        print(line, file=sys.stderr)
        return line
