"""Calibration of the linear probe's predictions: ECE, MCE (VEM appendix F), Brier score, NLL,
reliability bins (drawn by ``probcl.report``), and temperature scaling (Guo et al. 2017) fitted on a held-out split.

How much of an ECE is the test set's sampling: ``ece_bootstrap`` resamples the test images (the spread of the ECE
over other test sets of this size), and ``ece_floor`` is the ECE that a *perfectly calibrated* probe with these
confidences would show on this many images (labels drawn from the probe's own probabilities): ECE is biased upward
on a finite test set, so differences near the floor say little about the features.

Confidences are binned into M equal-width bins [0, 1/M), ..., [(M-1)/M, 1]; a confidence of
exactly 0 falls in the first bin and exactly 1 in the last.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import torch
import torch.nn.functional as F

from probcl.config import AtLeast, InRange, Seed
from probcl.core.calibration_bins import calibration_errors
from probcl.errors import ConfigError
from probcl.eval.context import ModelOnData
from probcl.eval.linear import LinearProbe
from probcl.eval.suites import SUITES, ProbeOptions, per_probe

N_BINS = 20  # VEM appendix F: M = 20


def reliability_bins(confidence: torch.Tensor, correct: torch.Tensor, n_bins: int = N_BINS) -> dict[str, list]:
    """Per-bin sample count, accuracy acc(B_m) (eq. 16) and mean confidence conf(B_m) (eq. 17);
    empty bins have count 0 and accuracy/confidence 0."""
    confidence = confidence.double().flatten()
    correct = correct.double().flatten()
    # k / M by correctly rounded division, so an edge equals the literal (0.15 == 3 / 20); linspace's
    # 0.15000000000000002 would put a confidence of exactly 0.15 one bin low.
    inner_edges = torch.arange(1, n_bins, dtype=torch.float64) / n_bins
    index = torch.bucketize(confidence, inner_edges, right=True)
    count = torch.zeros(n_bins, dtype=torch.float64).index_add_(0, index, torch.ones_like(confidence))
    acc = torch.zeros(n_bins, dtype=torch.float64).index_add_(0, index, correct) / count.clamp_min(1)
    conf = torch.zeros(n_bins, dtype=torch.float64).index_add_(0, index, confidence) / count.clamp_min(1)
    return {"count": count.long().tolist(), "accuracy": acc.tolist(), "confidence": conf.tolist()}


def brier_score(probs: torch.Tensor, labels: torch.Tensor) -> float:
    """Multi-class Brier score: mean over samples of sum_c (p_c - 1[y = c])^2 (range 0..2)."""
    onehot = F.one_hot(labels, probs.shape[1]).to(probs)
    return float(((probs - onehot) ** 2).sum(1).mean())


def calibration_metrics(logits: torch.Tensor, labels: torch.Tensor, n_bins: int = N_BINS) -> dict:
    """Top-1 (%), ECE, MCE, Brier, NLL and the reliability bins of softmax(logits)."""
    logits = logits.double()
    probs = logits.softmax(1)
    confidence, predicted = probs.max(1)
    bins = reliability_bins(confidence, predicted == labels, n_bins)
    ece, mce = calibration_errors(bins)
    return {
        "top1": 100.0 * float((predicted == labels).double().mean()),
        "ece": ece,
        "mce": mce,
        "brier": brier_score(probs, labels),
        "nll": float(F.cross_entropy(logits, labels)),
        "bins": bins,
    }


def fit_temperature(logits: torch.Tensor, labels: torch.Tensor, bounds: tuple[float, float] = (0.01, 100.0)) -> float:
    """The temperature T minimising the NLL of softmax(logits / T) (bounded 1-D search in log T)."""
    from scipy.optimize import minimize_scalar

    logits = logits.double()

    def nll(log_t: float) -> float:
        return float(F.cross_entropy(logits / math.exp(log_t), labels))

    result = minimize_scalar(
        nll, bounds=(math.log(bounds[0]), math.log(bounds[1])), method="bounded", options={"xatol": 1e-6}
    )
    return math.exp(result.x)


def _ece(confidence: torch.Tensor, correct: torch.Tensor, n_bins: int) -> float:
    return calibration_errors(reliability_bins(confidence, correct, n_bins))[0]


def ece_bootstrap(logits: torch.Tensor, labels: torch.Tensor, n_bins: int, resamples: int, seed: int = 0) -> dict:
    """The ECE over ``resamples`` bootstrap resamples of the test images (drawn with replacement, seeded): its
    standard deviation and 2.5 / 97.5 % percentiles."""
    confidence, predicted = logits.double().softmax(1).max(1)
    correct = predicted == labels
    generator = torch.Generator().manual_seed(seed)
    draws = (torch.randint(len(labels), (len(labels),), generator=generator) for _ in range(resamples))
    values = torch.tensor([_ece(confidence[i], correct[i], n_bins) for i in draws], dtype=torch.float64)
    return {
        "std": float(values.std()),
        "low": float(values.quantile(0.025)),
        "high": float(values.quantile(0.975)),
        "resamples": resamples,
    }


def ece_floor(logits: torch.Tensor, n_bins: int, resamples: int, seed: int = 0) -> dict:
    """The ECE of a perfectly calibrated probe with these predictions on this many images: each of ``resamples``
    draws takes every image's label from the probe's own probabilities (so confidence equals accuracy in
    expectation) and measures the ECE; their mean and standard deviation."""
    probs = logits.double().softmax(1)
    confidence, predicted = probs.max(1)
    generator = torch.Generator().manual_seed(seed)
    values = torch.tensor(
        [
            _ece(confidence, predicted == torch.multinomial(probs, 1, generator=generator).squeeze(1), n_bins)
            for _ in range(resamples)
        ],
        dtype=torch.float64,
    )
    return {"mean": float(values.mean()), "std": float(values.std()), "resamples": resamples}


def ece_floor_from_bins(bins: dict, resamples: int, seed: int = 0) -> dict:
    """:func:`ece_floor` from a result's reliability ``bins`` alone (for results that kept no probabilities): each
    bin's images counted correct with its mean confidence, Binomial(count, confidence) per bin and draw, so the
    floor of a calibrated probe whose confidences sit at their bins' means; mean and standard deviation."""
    count = torch.tensor(bins["count"], dtype=torch.float64)
    confidence = torch.tensor(bins["confidence"], dtype=torch.float64).clamp(0.0, 1.0)
    generator = torch.Generator().manual_seed(seed)
    draws = torch.stack(
        [torch.binomial(count, confidence, generator=generator) for _ in range(resamples)]
    )  # (resamples, bins): correct images per bin
    values = ((draws - count * confidence).abs().sum(1) / count.sum()).to(torch.float64)
    return {"mean": float(values.mean()), "std": float(values.std()), "resamples": resamples}


@dataclass
class CalibrationOptions(ProbeOptions):
    bins: Annotated[int, AtLeast(1)] = N_BINS  # M equal-width confidence bins
    # bootstrap resamples of the test images (ece_bootstrap) and draws of a calibrated probe (ece_floor); 0: neither
    resamples: Annotated[int, AtLeast(0)] = 200
    temperature_scaling: bool = True  # also report before/after temperature scaling
    holdout: Annotated[float, InRange(0, 1, low_open=True, high_open=True)] = 0.5  # share of the test set fitting T
    seed: Seed = 0  # seed of the held-out share that fits the temperature


@SUITES.register("calibration", options=CalibrationOptions, title="Calibration")
def calibration_suite(ctx: ModelOnData, options: CalibrationOptions) -> dict:
    """ECE/MCE (M bins), Brier, NLL of the linear probe on the test set, the reliability bins, the ECE's bootstrap
    spread over test images and the ECE floor of a calibrated probe at this test size, and before/after temperature
    scaling (T fitted on a held-out part of the test set, metrics on the rest)."""
    test_f, test_y = ctx.features("test")

    def measure(probe: LinearProbe) -> dict:
        logits = probe.logits(test_f)
        result = calibration_metrics(logits, test_y, options.bins)
        if options.resamples > 1:
            result["ece_bootstrap"] = ece_bootstrap(logits, test_y, options.bins, options.resamples, options.seed)
            result["ece_floor"] = ece_floor(logits, options.bins, options.resamples, options.seed)
        if options.temperature_scaling:
            result["temperature_scaling"] = _temperature_scaling(
                logits, test_y, options.bins, options.holdout, options.seed
            )
        return result

    result = per_probe(ctx, options, measure)
    result["protocol"] = ctx.protocol(
        bins=f"{options.bins} equal-width bins, confidence 0 -> first bin, 1 -> last bin",
        confidence="max softmax of the probe",
        brier="mean_i sum_c (p_ic - y_ic)^2",
        ece_bootstrap=f"{options.resamples} resamples of the test images with replacement (seed {options.seed})",
        ece_floor=f"ECE of a calibrated probe: {options.resamples} draws of every test label from the probe's "
        "own probabilities",
        probe=f"offline linear probe of the `linear` suite: {options.probes[0]}"
        + "".join(f"; {name} under `{name}`" for name in options.probes[1:]),
    )
    return result


def _temperature_scaling(logits: torch.Tensor, labels: torch.Tensor, bins: int, holdout: float, seed: int) -> dict:
    if not 0 < holdout < 1:
        raise ConfigError(f"calibration holdout must be in (0, 1), got {holdout}")
    perm = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    n_fit = max(1, int(round(holdout * len(labels))))
    fit, rest = perm[:n_fit], perm[n_fit:]
    if len(rest) == 0:
        raise ConfigError("calibration holdout leaves no test images to evaluate on; lower it")
    temperature = fit_temperature(logits[fit], labels[fit])
    before = calibration_metrics(logits[rest], labels[rest], bins)
    after = calibration_metrics(logits[rest] / temperature, labels[rest], bins)
    keep = ("ece", "mce", "brier", "nll")
    return {
        "temperature": temperature,
        "before": {k: before[k] for k in keep},
        "after": {k: after[k] for k in keep},
        "protocol": f"T fitted (min NLL) on a seeded {holdout:.0%} of the test set (seed {seed}), "
        f"before/after measured on the other {len(rest)} images",
    }
