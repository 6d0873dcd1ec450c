"""Calibration errors from reliability bins (torch-free, so that the report can pool bins without the eval stack).

``bins`` is what :func:`probcl.eval.calibration.reliability_bins` returns: per equal-width confidence bin
B_m, its sample count |B_m|, accuracy acc(B_m) (VEM eq. 16) and mean confidence conf(B_m) (eq. 17).
"""

from __future__ import annotations

import math

from probcl.errors import ConfigError


def calibration_errors(bins: dict[str, list]) -> tuple[float, float]:
    """(ECE, MCE): sum_m |B_m|/n |acc - conf| (eq. 18) and max over non-empty bins of |acc - conf| (eq. 19)."""
    counts = [float(c) for c in bins["count"]]
    gaps = [abs(float(a) - float(c)) for a, c in zip(bins["accuracy"], bins["confidence"])]
    total = math.fsum(counts)
    if total == 0:
        raise ConfigError("calibration errors need at least one prediction")
    ece = math.fsum(n / total * gap for n, gap in zip(counts, gaps))
    return ece, max(gap for n, gap in zip(counts, gaps) if n > 0)
