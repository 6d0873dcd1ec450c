"""Import every module of a package, so that their registration decorators run."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def import_submodules(package: ModuleType, skip: tuple[str, ...] = ()) -> list[ModuleType]:
    """Import all direct submodules of ``package`` (sorted by name) except ``skip``."""
    modules = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name in skip:
            continue
        modules.append(importlib.import_module(f"{package.__name__}.{info.name}"))
    return modules
