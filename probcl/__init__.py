"""probcl: probabilistic contrastive self-supervised learning (VEM, EBCLR, TaU, CEB and baselines)."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "evaluate", "load"]


def __getattr__(name: str) -> Any:
    """``probcl.load`` and ``probcl.evaluate`` are imported on first use, so that ``import probcl`` (and
    ``probcl --help``) stays light."""
    if name == "load":
        from probcl.runs.loading import load

        return load
    if name == "evaluate":
        from probcl.tasks.evaluate import evaluate

        return evaluate
    raise AttributeError(f"module 'probcl' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names with the lazy ``load`` and ``evaluate``, so that ``dir(probcl)`` and ``help(probcl)``
    list them."""
    return sorted({*globals(), *__all__})
