"""Out-of-distribution detection: metrics over outlier scores, the scores, and the ``ood`` suite.

All scores are outlier scores (higher = more likely out-of-distribution). AUROC and AUPR-out
take OOD as the positive class, AUPR-in takes in-distribution (ID) as positive with the
negated score, and FPR95 is the fraction of OOD samples accepted (score <= t) at the
smallest threshold t that accepts at least 95% of the ID samples. Ties are handled as in
scikit-learn (one threshold per distinct score value).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated

import numpy as np
import torch
import torch.nn.functional as F

from probcl.config import AtLeast, InRange, Seed
from probcl.data.ood_sets import GENERATED, generated_set
from probcl.data.sources import ImageSource, TensorImages
from probcl.errors import ConfigError, DatasetError
from probcl.eval.context import ModelOnData
from probcl.eval.id_reference import IdReference, ReferenceOptions, fit_reference
from probcl.eval.inputs import id_test_halves
from probcl.eval.knn import neighbours_within
from probcl.eval.linear import LinearProbe
from probcl.eval.ood_scores.calibration import COMBINED, two_sided
from probcl.eval.ood_scores.entries import KNN_KS
from probcl.eval.ood_scores.head import LinearHead
from probcl.eval.ood_scores.per_image import ID_CALIBRATION, ID_TEST, OOD_SCORES_FILE, PerImageScores, save_scores
from probcl.eval.ood_scores.registry import knn_name
from probcl.eval.outlier import DEFAULT_KNN_K, DEFAULT_TPR, knn_distance, knn_distances
from probcl.eval.score_table import method_uncertainty_fns
from probcl.eval.suites import SUITES

# Real OOD sets tried by default for a training dataset (skipped with a note when not installed).
DEFAULT_OOD_DATASETS = {
    "fashion-mnist": ["digits", "mnist"],
    "mnist": ["fashion-mnist", "digits"],
    "digits": ["fashion-mnist"],
    "cifar10": ["svhn", "cifar100"],
    "cifar100": ["svhn", "cifar10"],
    "stl10": ["svhn", "cifar10"],
}
TPR_LEVEL = DEFAULT_TPR


# ----------------------------------------------------------------------------- metrics


def _check_scores(id_scores, ood_scores) -> tuple[np.ndarray, np.ndarray]:
    id_s = np.asarray(torch.as_tensor(id_scores).detach().cpu(), dtype=np.float64).ravel()
    ood_s = np.asarray(torch.as_tensor(ood_scores).detach().cpu(), dtype=np.float64).ravel()
    for name, s in (("in-distribution", id_s), ("out-of-distribution", ood_s)):
        if s.size == 0:
            raise ConfigError(f"no {name} scores: OOD metrics need at least one sample of each class")
        if not np.isfinite(s).all():
            raise ConfigError(
                f"{int((~np.isfinite(s)).sum())} {name} scores are NaN or infinite; "
                f"the score function failed on those images"
            )
    return id_s, ood_s


def _binary_curve(scores: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """True/false positive counts at each distinct threshold, from the highest score down."""
    order = np.argsort(-scores, kind="mergesort")
    scores, positive = scores[order], positive[order]
    last_of_value = np.r_[np.nonzero(np.diff(scores))[0], len(scores) - 1]
    tps = np.cumsum(positive)[last_of_value]
    return tps, (last_of_value + 1) - tps


def auroc(id_scores, ood_scores) -> float:
    """Area under the ROC curve with OOD as the positive class (trapezoids; ties count one half)."""
    id_s, ood_s = _check_scores(id_scores, ood_scores)
    tps, fps = _binary_curve(np.r_[id_s, ood_s], np.r_[np.zeros(len(id_s)), np.ones(len(ood_s))])
    tpr, fpr = np.r_[0.0, tps / len(ood_s)], np.r_[0.0, fps / len(id_s)]
    return float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))


def average_precision(scores: np.ndarray, positive: np.ndarray) -> float:
    """Area under the precision-recall curve as a step sum: sum_n (R_n - R_{n-1}) P_n."""
    tps, fps = _binary_curve(scores, positive)
    precision, recall = tps / (tps + fps), tps / tps[-1]
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def aupr(id_scores, ood_scores) -> tuple[float, float]:
    """(AUPR-in, AUPR-out): ID positive with the negated score, and OOD positive."""
    id_s, ood_s = _check_scores(id_scores, ood_scores)
    is_ood = np.r_[np.zeros(len(id_s)), np.ones(len(ood_s))]
    both = np.r_[id_s, ood_s]
    return average_precision(-both, 1 - is_ood), average_precision(both, is_ood)


def fpr_at_tpr(id_scores, ood_scores, level: float = TPR_LEVEL) -> float:
    """Fraction of OOD scores <= t, for the smallest t with at least ``level`` of the ID scores <= t."""
    id_s, ood_s = _check_scores(id_scores, ood_scores)
    count = max(1, math.ceil(level * len(id_s) - 1e-9))
    threshold = np.sort(id_s)[count - 1]
    return float(np.mean(ood_s <= threshold))


def ood_metrics(id_scores, ood_scores) -> dict[str, float]:
    """AUROC, AUPR-in, AUPR-out and FPR95 of outlier scores."""
    aupr_in, aupr_out = aupr(id_scores, ood_scores)
    return {
        "auroc": auroc(id_scores, ood_scores),
        "aupr_in": aupr_in,
        "aupr_out": aupr_out,
        "fpr95": fpr_at_tpr(id_scores, ood_scores),
    }


# ----------------------------------------------------------------------------- scores


def mc_dropout_probs(probe: LinearProbe, features: torch.Tensor, p: float, passes: int, seed: int = 0) -> torch.Tensor:
    """Softmax outputs (passes, N, C) of the probe with dropout (rate p, inverted scaling) on its
    standardized input features."""
    if not 0 <= p < 1:
        raise ConfigError(f"dropout rate must be in [0, 1), got {p}")
    generator = torch.Generator().manual_seed(seed)
    z = (features.float() - probe.mean) / probe.std
    out = []
    for _ in range(passes):
        keep = (torch.rand(z.shape, generator=generator) >= p).to(z) / (1 - p)
        out.append(((z * keep) @ probe.weight.T + probe.bias).softmax(1))
    return torch.stack(out)


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """Shannon entropy (nats) of categorical distributions along the last dimension."""
    return -(probs * probs.clamp_min(1e-12).log()).sum(-1)


def mutual_information(probs: torch.Tensor) -> torch.Tensor:
    """BALD mutual information H[mean_t p_t] - mean_t H[p_t] of stacked predictions (T, N, C)."""
    return entropy(probs.mean(0)) - entropy(probs).mean(0)


def histograms(scores: dict[str, torch.Tensor], bins: int) -> dict:
    """Counts of each set's scores on shared equal-width bins (for the report's histograms)."""
    values = torch.cat([s.flatten().float() for s in scores.values()])
    lo, hi = values.min().item(), values.max().item()
    hi = hi if hi > lo else lo + 1.0
    edges = torch.linspace(lo, hi, bins + 1)
    return {
        "edges": edges.tolist(),
        "counts": {name: torch.histc(s.float(), bins, lo, hi).long().tolist() for name, s in scores.items()},
    }


# ----------------------------------------------------------------------------- suite


def projection_knn_scores(id_projections: torch.Tensor, others: dict[str, torch.Tensor], k: int) -> dict:
    """The TaU paper's kNN baseline (the authors' code, docs/methods/tau.md#from-the-authors-code): mean Euclidean
    distance to the ``k`` nearest L2-normalized projections of the ID evaluation images; an ID image's own match is
    left out."""
    bank = F.normalize(id_projections.double(), dim=1)
    scores = {"id": knn_distances(bank, bank, (k,), exclude_self=True)[k]}
    scores.update({name: knn_distance(bank, F.normalize(p.double(), dim=1), k) for name, p in others.items()})
    return scores


def mc_dropout_spread(projections: torch.Tensor) -> torch.Tensor:
    """The TaU paper's MC-dropout score of (passes, N, d) L2-normalized projections: the std over passes,
    averaged over dimensions (N,)."""
    return projections.std(0).mean(1)


ENSEMBLE_SCORES = ("ensemble_msp", "ensemble_entropy")


def ensemble_scores(member_probs: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Deep-ensemble outlier scores (Lakshminarayanan et al. 2017) of the members' softmax outputs (N, C) on the
    same images: -max and the entropy of the mean prediction."""
    mean = torch.stack([p.float() for p in member_probs]).mean(0)
    return {"ensemble_msp": -mean.amax(1), "ensemble_entropy": entropy(mean)}


def seed_ensemble_metrics(members: list[dict[str, torch.Tensor]]) -> dict[str, dict[str, dict[str, float]]]:
    """``{set: {score: metrics}}`` of the deep ensemble of several runs' saved probe outputs
    (:data:`PROBE_OUTPUTS`: ``{"id": (N, C), set: (M, C), ...}`` softmax outputs on the same images)."""
    if len(members) < 2:
        raise ConfigError(f"a deep ensemble needs at least 2 members, got {len(members)}")
    names = [name for name in members[0] if name != "id"]
    for member in members[1:]:
        if set(member) != set(members[0]) or any(len(member[n]) != len(members[0][n]) for n in member):
            raise ConfigError("the ensemble's members scored different images; evaluate them with the same ood options")
    id_scores = ensemble_scores([m["id"] for m in members])
    result: dict[str, dict[str, dict[str, float]]] = {}
    for name in names:
        ood = ensemble_scores([m[name] for m in members])
        result[name] = {score: ood_metrics(id_scores[score], ood[score]) for score in ENSEMBLE_SCORES}
    return result


PROBE_OUTPUTS = "ood-probe-outputs.pt"  # a run's probe softmax outputs on the ood suite's images (keep_probe_outputs)


@dataclass
class OodOptions:
    datasets: list[str] | None = None  # OOD sets (default: real sets for the training data + generated ones)
    max_images: Annotated[int | None, AtLeast(1)] = None  # seeded subset of each ID test half and each OOD set
    # k of kNN distances, besides the registered ones (1, 10, 50)
    knn_k: list[Annotated[int, AtLeast(1)]] = field(default_factory=lambda: list(KNN_KS))
    # k of the TaU paper's kNN on projections (knn{k}_projection)
    projection_knn_k: Annotated[int, AtLeast(1)] = DEFAULT_KNN_K
    mc_passes: Annotated[int, AtLeast(1)] = 20  # MC-dropout forward passes (probe input; encoder dropout)
    dropout: Annotated[float, InRange(0, 1, high_open=True)] = 0.2  # MC-dropout rate on the probe's input
    runs: list[str] | None = None  # other runs of the same method: deep-ensemble MSP
    keep_probe_outputs: bool = False  # save the probe's softmax outputs (RUN/ood-probe-outputs.pt) for an ensemble
    seed: Seed = 0  # seed of the image subsets, MC dropout and generated sets
    histogram_bins: Annotated[int, AtLeast(1)] = 40  # bins of the score histograms (figure)
    combination: list[str] | None = None  # scores of the ID-fitted combined score (default: see id_reference)


def ood_sets(
    ctx: ModelOnData, specs: list[str] | None, id_data: TensorImages, max_images: int | None, seed: int
) -> tuple[dict[str, ImageSource], dict[str, str]]:
    """Named OOD datasets (requested or default) and the default ones skipped because not installed."""
    explicit = bool(specs)
    if not specs:
        specs = DEFAULT_OOD_DATASETS.get(ctx.info.dataset, []) + list(GENERATED)
    sets: dict[str, ImageSource] = {}
    skipped = {}
    for spec in specs:
        if spec in GENERATED:
            sets[spec] = generated_set(spec, id_data, seed)
            continue
        try:
            data = ctx.dataset(spec, "test")
        except DatasetError as e:
            if explicit:
                raise
            skipped[spec] = str(e).split(". ")[0]
            continue
        sets[spec] = data.seeded_subset(max_images, seed)
    if not sets:
        raise ConfigError("no OOD set available; pass --option ood.datasets=noise:gaussian,inverted,...")
    return sets, skipped


def _probe_probs(member: ModelOnData, id_idx: torch.Tensor, sets: dict) -> dict[str, torch.Tensor]:
    _, probe = member.linear_probe()
    feats = {"id": member.features("test")[0][id_idx]}
    feats.update({name: member.extract(data, f"ensemble member features: {name}")[0] for name, data in sets.items()})
    return {name: probe.logits(f).softmax(1) for name, f in feats.items()}


def _mc_dropout_scores(ctx: ModelOnData, data: dict[str, ImageSource], passes: int, seed: int) -> dict:
    """:func:`mc_dropout_spread` of every image of each set (the model's encoder dropout on)."""
    model = ctx.model
    out = {}
    for name, images in data.items():
        parts = [
            mc_dropout_spread(model.mc_dropout_projections(x.to(ctx.torch_device), passes, seed).float().cpu())
            for x, _, _, _ in ctx.batches(images, f"MC-dropout passes: {name}")
            if x is not None
        ]
        out[name] = torch.cat(parts)
    return out


def ood_summary(result: dict) -> dict[str, float]:
    """The console's view of an ``ood`` result: per OOD set, the combined score's AUROC and FPR95 and the best
    single score's AUROC (named); the other scores and metrics stay in eval.json and the report."""
    rows: dict[str, float] = {}
    for name, scores in result["sets"].items():
        if COMBINED in scores:
            rows[f"{name}: {COMBINED} auroc"] = scores[COMBINED]["auroc"]
            rows[f"{name}: {COMBINED} fpr95"] = scores[COMBINED]["fpr95"]
        single = {score: metrics["auroc"] for score, metrics in scores.items() if score != COMBINED}
        if single:
            best = max(single, key=single.__getitem__)
            rows[f"{name}: best single ({best}) auroc"] = single[best]
    return rows


def _save_per_image_scores(
    ctx: ModelOnData, reference: IdReference, calibration: dict, outputs: dict, seed: int
) -> dict | None:
    """Every registered score of the ID calibration half, the held-out ID half and each OOD set, saved as
    ``RUN/ood-scores.npz`` (:mod:`probcl.eval.ood_scores.per_image`); its name and size (None: no run folder)."""
    if ctx.run_dir is None:
        return None
    names = reference.score_names
    sets = {ID_CALIBRATION: calibration, ID_TEST: outputs["id"], **{k: v for k, v in outputs.items() if k != "id"}}
    meta = {
        "run": ctx.name,
        "method": ctx.method,
        "dataset": ctx.info.dataset,
        "combination": reference.combination,
        "knn_k": reference.knn_k,
        "seed": seed,
        "tpr": TPR_LEVEL,
        "sizes": {name: len(values["labels"]) for name, values in sets.items()},
    }
    scores = PerImageScores({name: {s: values[s] for s in names} for name, values in sets.items()}, meta)
    size = save_scores(ctx.paths.root / OOD_SCORES_FILE, scores)
    return {"file": OOD_SCORES_FILE, "bytes": size, "sets": list(sets), "scores": names}


@SUITES.register("ood", options=OodOptions, title="Out-of-distribution detection", summary=ood_summary)
def ood_suite(ctx: ModelOnData, options: OodOptions) -> dict:
    """AUROC, AUPR-in/out and FPR95 of every outlier score (probe MSP, energy, MC-dropout on the probe input,
    the TaU paper's kNN on projections and MC-dropout in the encoder, a deep ensemble over ``runs``, and the
    ID-fitted scores of :mod:`probcl.eval.id_reference`: kNN distances, feature norm, Mahalanobis, input
    statistics, the method's own, their combination) against each OOD set.

    The ID test images are cut into two seeded halves (:func:`~probcl.eval.inputs.calibration_halves`, as
    ``benchmarks/ood_battery.py`` does): the ID-fitted scores calibrate their tails and thresholds on the first,
    and every metric compares the second half, which no fitted quantity has seen, with the OOD sets (generated
    ones are made from it). ``id_accepted`` is the share of those held-out ID images the combined score accepts
    at its threshold (promised >= 95 % in expectation). Scores that can fail both ways (feature norm, the
    method's own, image energy) are reported raw and one-sided (``NAME``: higher = OOD) and as the two-sided
    tail the combination uses (``NAME:two-sided`` = -log p_two-sided)."""
    o = options
    calibration, id_data, id_idx = id_test_halves(ctx, "ood", o.max_images, o.seed)
    sets, skipped = ood_sets(ctx, o.datasets, id_data, o.max_images, o.seed)
    _, probe = ctx.linear_probe()
    reference, id_calibration = fit_reference(
        ctx,
        calibration,
        ReferenceOptions(combination=o.combination, seed=o.seed),
        LinearHead.of_probe(probe),
        [knn_name(k, normalized=True) for k in o.knn_k],
    )
    images: dict[str, ImageSource] = {"id": id_data, **sets}
    outputs = {name: reference.collect(ctx, data, f"scores: {name}") for name, data in images.items()}
    features = {name: out.pop("features") for name, out in outputs.items()}
    scores: dict[str, dict[str, torch.Tensor]] = {name: {} for name in features}
    probe_outputs, accepted = {}, math.nan
    for name, f in features.items():
        probe_outputs[name] = probe.logits(f).softmax(1)
        probs = mc_dropout_probs(probe, f, o.dropout, o.mc_passes, o.seed)
        scores[name]["mc_dropout_entropy"] = entropy(probs.mean(0))
        scores[name]["mc_dropout_mi"] = mutual_information(probs)
        id_scores = {s: v for s, v in outputs[name].items() if s != "labels"}
        scores[name].update(id_scores)
        decision = reference.decision(id_scores)
        scores[name][COMBINED] = decision["ood_score"]
        scores[name].update(
            {f"{s}:two-sided": -decision[f"p:{s}"].log().float() for s in reference.score_names if two_sided(s)}
        )
        if name == "id":  # the share of held-out ID images the combined score accepts at its threshold
            accepted = 1.0 - float(reference.flags(decision)[0].float().mean())
    if ctx.foreign is None:  # a run: the TaU paper's kNN on L2-normalized projections of the held-out ID images
        projections = {name: ctx.extract(d, f"projections: {name}", "projection")[0] for name, d in images.items()}
        id_projections = projections.pop("id")  # the bank: each ID image's own match is left out, so n - 1 of it
        k = neighbours_within(o.projection_knn_k, len(id_projections) - 1, "ood.projection_knn_k", ctx.note)
        knn = projection_knn_scores(id_projections, projections, k)
        for name, values in knn.items():
            scores[name][f"knn{o.projection_knn_k}_projection"] = values
        if ctx.config.model.dropout2d > 0:  # trained with encoder dropout: the TaU paper's MC-dropout
            for name, values in _mc_dropout_scores(ctx, images, o.mc_passes, o.seed).items():
                scores[name]["mc_dropout_projection"] = values
    members = [ctx.for_run(r) for r in o.runs or []]
    if members:
        member_probs = [probe_outputs, *(_probe_probs(m, id_idx, sets) for m in members)]
        for name in features:
            scores[name]["ensemble_msp"] = ensemble_scores([p[name] for p in member_probs])["ensemble_msp"]
    if o.keep_probe_outputs and ctx.run_dir is not None:
        torch.save({name: p.half() for name, p in probe_outputs.items()}, ctx.paths.root / PROBE_OUTPUTS)
    saved = _save_per_image_scores(ctx, reference, id_calibration, outputs, o.seed)
    score_names = list(scores["id"])
    dropout_note = (
        f"channel dropout p={ctx.config.model.dropout2d} in the encoder, {o.mc_passes} passes: "
        "mean over dimensions of the std of the L2-normalized projections (TaU paper)"
        if "mc_dropout_projection" in score_names
        else None
    )
    return {
        "sets": {name: {s: ood_metrics(scores["id"][s], scores[name][s]) for s in score_names} for name in sets},
        "id_accepted": accepted,
        "histograms": {
            s: histograms({name: scores[name][s] for name in scores}, o.histogram_bins) for s in score_names
        },
        "protocol": ctx.protocol(
            positive="OOD (outlier scores: higher = more OOD)",
            fpr95=f"OOD accepted at {TPR_LEVEL:.0%} ID accepted",
            id_images=len(id_data),
            calibration_images=len(calibration),
            id_split="the ID test set cut into two seeded halves: the ID-fitted scores are calibrated on one, "
            "every metric and id_accepted measured on the other (held out)",
            ood_images={name: len(data) for name, data in sets.items()},
            probe="offline linear probe of the `linear` suite (the head of msp, energy, max_logit, vim)",
            knn_projection=f"knn{o.projection_knn_k}_projection: the TaU paper's kNN baseline, mean Euclidean distance "
            f"to the {o.projection_knn_k} nearest L2-normalized projections of the held-out ID images, self-match "
            "removed"
            if ctx.foreign is None
            else None,
            two_sided="NAME:two-sided = -log of NAME's two-sided ID tail probability, the form the combined score "
            "uses; NAME itself is the raw one-sided score",
            id_fitted=reference.protocol(),
            mc_dropout=f"dropout p={o.dropout} on the probe's standardized input, {o.mc_passes} passes; "
            f"entropy of the mean prediction and BALD mutual information",
            mc_dropout_projection=dropout_note,
            method_uncertainty=list(method_uncertainty_fns(ctx.encoder)) or None,
            ensemble_runs=[ctx.name] + [m.name for m in members] if members else None,
            probe_outputs=PROBE_OUTPUTS if o.keep_probe_outputs and ctx.run_dir is not None else None,
            per_image_scores=saved,
            generated=f"{', '.join(GENERATED)} from the held-out ID test images, seed {o.seed}",
            skipped=skipped or None,
            seed=o.seed,
        ),
    }
