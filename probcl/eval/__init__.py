"""Evaluation: pure functions over features/logits, and suites registered by name in ``SUITES``.

Every module of this package is imported so that the suites it registers are known.
"""
import sys

from probcl.core.discovery import import_submodules
from probcl.eval.suites import SUITES, EvalContext

import_submodules(sys.modules[__name__])

__all__ = ["SUITES", "EvalContext"]
