"""Evaluation: pure functions over features/logits, and suites registered by name."""
from probcl.eval.suites import SUITES, EvalContext

__all__ = ["SUITES", "EvalContext"]
