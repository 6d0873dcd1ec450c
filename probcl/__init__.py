"""probcl: probabilistic contrastive self-supervised learning (VEM, EBCLR, TaU, CEB and baselines)."""
from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "load"]


def __getattr__(name: str) -> Any:
    """``probcl.load`` is imported on first use, so that ``import probcl`` (and ``probcl --help``) stays light."""
    if name == "load":
        from probcl.core.runs import load

        return load
    raise AttributeError(f"module 'probcl' has no attribute {name!r}")
