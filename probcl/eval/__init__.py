"""Evaluation: pure functions over features/logits, the model-on-data context, and suites registered in ``SUITES``.

``SUITES`` and ``ModelOnData`` imported from this package load every module of it first (so that each suite
has registered itself). The modules that need no model (``id_reference``, ``ood_scores``, ``outlier``,
``linear``, ...) import alone, without PyTorch Lightning: ``probcl score``'s repeat calls depend on that.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from probcl.eval.context import ModelOnData
    from probcl.eval.suites import SUITES

__all__ = ["SUITES", "ModelOnData"]


def __getattr__(name: str) -> Any:
    """``SUITES`` / ``ModelOnData``, after importing every module of the package (PEP 562)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from probcl.core.discovery import import_submodules
    from probcl.eval import context, suites

    import_submodules(sys.modules[__name__])
    return {"SUITES": suites.SUITES, "ModelOnData": context.ModelOnData}[name]
