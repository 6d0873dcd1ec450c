"""Sample efficiency from the per-epoch online monitor (``monitor/knn_top1``, ``monitor/probe_top1``).

EBCLR Tables 1 and 3: the efficiency of a reference run relative to this run is
(the number of epochs this run needs to reach the reference's final accuracy) /
(the reference's total number of epochs); below 1 means this run learns faster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from probcl.core.metrics_file import epoch_curve
from probcl.errors import RunError
from probcl.eval.context import ModelOnData
from probcl.eval.suites import SUITES

MONITOR_KEYS = {"knn_top1": "monitor/knn_top1", "probe_top1": "monitor/probe_top1"}


def epochs_to_reach(curve: Sequence[tuple[int, float]], target: float) -> int | None:
    """The first epoch count (1-based: epoch index + 1) at which the curve is >= target; None if never."""
    for epoch, value in curve:
        if value >= target:
            return epoch + 1
    return None


def relative_efficiency(curve: Sequence[tuple[int, float]], reference: Sequence[tuple[int, float]]) -> float | None:
    """epochs_to_reach(curve, final value of reference) / epochs of reference; None if never reached."""
    if not curve or not reference:
        raise RunError("relative efficiency needs per-epoch monitor values for both runs (metrics.jsonl)")
    reached = epochs_to_reach(curve, reference[-1][1])
    return None if reached is None else reached / (reference[-1][0] + 1)


@dataclass
class EfficiencyOptions:
    reference: str | None = None  # run directory whose final accuracy this run must reach


@SUITES.register(
    "efficiency", options=EfficiencyOptions, title="Sample efficiency", needs_run="its training curves (metrics.jsonl)"
)
def efficiency_suite(ctx: ModelOnData, options: EfficiencyOptions) -> dict:
    """Per-epoch monitor curves, their final/best values, and EBCLR's relative efficiency of a
    ``reference`` run with respect to this run."""
    reference = options.reference
    result: dict = {"curves": {}, "final": {}, "best": {}}
    for name, key in MONITOR_KEYS.items():
        curve = epoch_curve(ctx.paths.root, key)
        if curve:
            result["curves"][name] = curve
            result["final"][name] = curve[-1][1]
            result["best"][name] = max(v for _, v in curve)
    if not result["curves"]:
        raise RunError(
            f"{ctx.run_dir} has no per-epoch monitor values in metrics.jsonl "
            f"(train with labeled data and train.monitor_every_n_epochs >= 1)"
        )
    if reference:
        result["relative_efficiency"] = {}
        result["reference_final"] = {}
        for name, key in MONITOR_KEYS.items():
            ref_curve = epoch_curve(Path(reference), key)
            if name in result["curves"] and ref_curve:
                result["relative_efficiency"][name] = relative_efficiency(result["curves"][name], ref_curve)
                result["reference_final"][name] = ref_curve[-1][1]
    result["protocol"] = {
        "source": "online monitor in metrics.jsonl: weighted kNN (k=200, T=0.1) and online linear probe, per epoch",
        "relative_efficiency": "(epochs this run needs to reach the reference's final value) / "
        "(reference's epochs); null = never reached",
        "reference": reference,
        "epochs": max(len(c) for c in result["curves"].values()),
    }
    return result
