"""Old spellings that keep working for one release, each with one line naming the new one (torch-free).

The glossary (docs/glossary.md) fixes one word per meaning across sub-commands; every spelling it retired is
listed where it is parsed (an argparse flag, a suite option) and goes through :func:`warn_renamed`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

REMOVED_IN = "0.3"  # the release that drops the old spellings


def warn_renamed(old: str, new: str) -> None:
    """One line on stderr: ``old`` is now ``new``."""
    print(f"probcl: deprecated: {old} is now {new}; {old} stops working in probcl {REMOVED_IN}", file=sys.stderr)


class RenamedFlag(argparse.Action):
    """An argparse action for a retired flag: stores into the new flag's ``dest`` and says the new spelling once.

    ``p.add_argument("--data", dest="dataset", action=RenamedFlag, new="--dataset", help=argparse.SUPPRESS)``
    """

    def __init__(self, option_strings: Sequence[str], dest: str, new: str, **kwargs: Any) -> None:
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        warn_renamed(option or self.option_strings[0], self.new)
        setattr(namespace, self.dest, values)


def renamed_keys(raw: dict[str, Any], renamed: dict[str, str], where: str) -> dict[str, Any]:
    """``raw`` with every retired key of ``renamed`` (old -> new) replaced by its new name, saying so once each."""
    out = dict(raw)
    for old, new in renamed.items():
        if old in out:
            warn_renamed(f"{where}.{old}", f"{where}.{new}")
            out.setdefault(new, out.pop(old))
    return out
