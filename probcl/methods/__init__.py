"""Self-supervised methods, registered by name in ``METHODS``.

The names below imported from this package load every method module first (so that each method has
registered itself). ``probcl.methods.capabilities`` imports alone, without PyTorch Lightning (the scores of
``probcl score``'s repeat calls ask a model for capabilities without loading one).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from probcl.data.info import DataInfo
    from probcl.errors import TrainingDivergedError
    from probcl.methods.base import METHODS, SSLMethod, StepOutput

__all__ = ["METHODS", "DataInfo", "SSLMethod", "StepOutput", "TrainingDivergedError"]


def __getattr__(name: str) -> Any:
    """A name of ``probcl.methods.base``, after importing every method module (PEP 562)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name == "TrainingDivergedError":  # probcl.errors' class, also named here for the methods' users
        from probcl.errors import TrainingDivergedError

        return TrainingDivergedError
    from probcl.core.discovery import import_submodules
    from probcl.methods import base

    import_submodules(sys.modules[__name__], skip=("base",))
    return getattr(base, name)
