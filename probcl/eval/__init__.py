"""Evaluation: pure functions over features/logits, the model-on-data context, and suites registered in ``SUITES``.

Every module of this package is imported so that the suites it registers are known.
"""

import sys

from probcl.core.discovery import import_submodules
from probcl.eval.context import ModelOnData
from probcl.eval.suites import SUITES

import_submodules(sys.modules[__name__])

__all__ = ["SUITES", "ModelOnData"]
