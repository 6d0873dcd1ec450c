"""Self-supervised methods, registered by name in ``METHODS`` (every module here is imported)."""

import sys

from probcl.core.discovery import import_submodules
from probcl.methods.base import METHODS, DataInfo, SSLMethod, StepOutput, TrainingDivergedError

import_submodules(sys.modules[__name__], skip=("base",))

__all__ = ["METHODS", "DataInfo", "SSLMethod", "StepOutput", "TrainingDivergedError"]
