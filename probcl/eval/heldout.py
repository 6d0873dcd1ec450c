"""The ``heldout`` suite: a run's representation scored on held-out *training* images, for choosing settings
without the test split (equal-budget tuning, docs/study-v3-protocol.md).

The run's training split (its class-filtered dataset, e.g. ``fashion-mnist:classes=0-7``) is cut by a fixed
permutation (``split_seed``, the same for every run): ``score_images`` images that the run did *not* pretrain on
(outside its seeded ``data.train_subset``) are scored, and the linear probe (probcl's L-BFGS logistic regression,
its L2 chosen inside the fit images) and the weighted kNN are fitted on ``fit_images`` of the others; the probe's
ECE on the scored images is measured as the calibration suite measures it (20 equal-width bins). Only the training
split is ever loaded; the test split stays unseen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch
import torch.nn.functional as F

from probcl.config import AtLeast, Positive, Seed
from probcl.data.sources import pretraining_indices
from probcl.errors import ConfigError
from probcl.eval.calibration import N_BINS, calibration_metrics
from probcl.eval.context import ModelOnData
from probcl.eval.knn import knn_classify, neighbours_within, topk_accuracy
from probcl.eval.linear import linear_probe
from probcl.eval.ood import auroc
from probcl.eval.outlier import knn_distance
from probcl.eval.suites import SUITES


@dataclass
class HeldoutOptions:
    """How the training split is cut into probe-fitting and scored images."""

    fit_images: Annotated[int, AtLeast(1)] = 20000  # training images the probe and kNN are fitted on
    score_images: Annotated[int, AtLeast(1)] = 8000  # held-out training images scored (not pretrained on)
    split_seed: Seed = 12345  # the permutation that cuts the split: the same for every run compared
    knn_k: Annotated[int, AtLeast(1)] = 200  # neighbours of the weighted kNN
    temperature: Annotated[float, Positive] = 0.1  # T of its exp(sim / T) votes
    # near-OOD classes' *training* images (a class filter, e.g. fashion-mnist:classes=6,7; none by default): AUROC
    # of the kNN distance (k 10, L2-normalized backbone features, to the fit images) against the scored images
    near_ood: str | None = None
    near_ood_images: Annotated[int, AtLeast(1)] = 2000  # a seeded subset (split_seed) of them


def heldout_indices(
    n: int, pretrained: torch.Tensor, fit_images: int, score_images: int, split_seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(fit, score) indices among a training split's ``n`` images: ``score_images`` of those not in
    ``pretrained``, then ``fit_images`` of all the rest, both in the order of one seeded permutation; disjoint.
    One ConfigError when the split is too small."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(split_seed))
    seen = torch.zeros(n, dtype=torch.bool)
    seen[pretrained] = True
    unseen = perm[~seen[perm]]
    if len(unseen) < score_images or n - score_images < fit_images:
        raise ConfigError(
            f"heldout: the training split has {n} images, {len(unseen)} of them not pretrained on; it cannot give "
            f"{score_images} unseen images to score and {fit_images} others to fit on: lower "
            "heldout.score_images / heldout.fit_images or data.train_subset"
        )
    score = unseen[:score_images]
    taken = torch.zeros(n, dtype=torch.bool)
    taken[score] = True
    fit = perm[~taken[perm]][:fit_images]
    return fit, score


def heldout_ece(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """ECE of softmax(``logits``) as the calibration suite computes it (max-softmax confidence, N_BINS bins)."""
    return calibration_metrics(logits, labels, N_BINS)["ece"]


@SUITES.register(
    "heldout",
    options=HeldoutOptions,
    title="Held-out training images",
    needs_run="it excludes the images the run pretrained on (its data.train_subset)",
)
def heldout_suite(ctx: ModelOnData, options: HeldoutOptions) -> dict:
    """Linear-probe and weighted-kNN top-1 (%) and the probe's ECE on held-out training images, fitted on other
    training images; with ``near_ood``, the kNN-distance AUROC of near-OOD classes' training images."""
    data = ctx.dataset(None, "train", cap_train=False)
    labels = data.labels()
    if labels is None or bool((labels < 0).any()):
        raise ConfigError(f"heldout: {data.name} has unlabeled training images; the suite needs labels")
    d = ctx.config.data
    pretrained = pretraining_indices(len(data), d.train_subset, ctx.config.train.seed)
    fit, score = heldout_indices(len(data), pretrained, options.fit_images, options.score_images, options.split_seed)
    fit_f, fit_y = ctx.extract(data.subset(fit), f"{ctx.feature_layer} features: {data.name} train (fit)")
    score_f, score_y = ctx.extract(data.subset(score), f"{ctx.feature_layer} features: {data.name} train (held out)")
    result, probe = linear_probe(fit_f, fit_y, score_f, score_y, ctx.num_classes, seed=ctx.seed)
    knn_k = neighbours_within(options.knn_k, len(fit_f), "heldout.knn_k", ctx.note)
    scores, _ = knn_classify(fit_f, fit_y, score_f, ctx.num_classes, knn_k, options.temperature)
    assert scores is not None
    near_ood = (
        {} if options.near_ood is None else {"near_ood_knn10_auroc": _near_ood_auroc(ctx, options, fit_f, score_f)}
    )
    return {
        "linear_top1": result["top1"],
        "linear_ece": heldout_ece(probe.logits(score_f), score_y),
        "knn_top1": topk_accuracy(scores, score_y, (1,))["top1"],
        **near_ood,
        "protocol": {
            "feature_layer": ctx.feature_layer,
            "split": "train only (the test split is never loaded)",
            "fit_images": len(fit),
            "score_images": len(score),
            "scored_images_pretrained_on": 0,
            "split_seed": options.split_seed,
            "probe": "L-BFGS logistic regression",
            "probe_l2": result["protocol"]["l2"],
            "ece": f"max-softmax confidence of the probe, {N_BINS} equal-width bins (the calibration suite's)",
            "knn": f"k={knn_k}, T={options.temperature}, cosine, exp(sim/T) votes",
            "near_ood": None if options.near_ood is None else f"{options.near_ood} train split, kNN distance k 10",
        },
    }


def _near_ood_auroc(ctx: ModelOnData, options: HeldoutOptions, fit_f: torch.Tensor, score_f: torch.Tensor) -> float:
    """AUROC (near-OOD positive) of the mean distance to the 10 nearest fit images, L2-normalized features."""
    assert options.near_ood is not None
    ood = ctx.dataset(options.near_ood, "train", cap_train=False).seeded_subset(
        options.near_ood_images, options.split_seed
    )
    ood_f, _ = ctx.extract(ood, f"{ctx.feature_layer} features: {ood.name} train (near OOD)")
    reference = F.normalize(fit_f, dim=1)
    return auroc(
        knn_distance(reference, F.normalize(score_f, dim=1)), knn_distance(reference, F.normalize(ood_f, dim=1))
    )
