"""Self-supervised methods, registered by name in ``METHODS``."""
from probcl.methods.base import METHODS, DataInfo, SSLMethod, StepOutput, TrainingDivergedError
from probcl.methods import simclr  # noqa: F401  (registers)

__all__ = ["METHODS", "DataInfo", "SSLMethod", "StepOutput", "TrainingDivergedError"]
