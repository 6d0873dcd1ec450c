"""probcl's OOD scores, one :class:`~probcl.eval.ood_scores.registry.OodScore` entry each, registered in column
order (the order of ``probcl score``'s columns and of the default combination).

Feature distances (kNN at k = 1, 10, 50 on L2-normalised and raw features, Mahalanobis, relative Mahalanobis),
input guards (feature norm, input statistics), classifier-head scores (MSP, energy, max-logit, ViM; where a linear
head exists) and the method's own uncertainty (vMF density, image energy, ``uncertainty:NAME``).
"""

from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F

from probcl.eval.ood_scores.head import LinearHead, energy, fit_vim, max_logit, msp, vim_score
from probcl.eval.ood_scores.registry import (
    COMBINATION_KNN_FAMILY,
    COMBINATION_KNN_K,
    KNN_FAMILY,
    RAW_KNN_FAMILY,
    SCORES,
    FitData,
    OodScore,
    ScoreBatch,
    State,
    knn_name,
)
from probcl.eval.ood_scores.statistics import Gaussian, fit_gaussian
from probcl.eval.outlier import DEFAULT_KNN_K, nearest_distances

KNN_KS = (1, DEFAULT_KNN_K, 50)  # the k values of the OOD literature (Sun et al. 2022 use 50 on CIFAR)
KNN_DEPTH = max(KNN_KS)  # neighbours found once per batch and bank; every k up to it reads them


# ----------------------------------------------------------------------------- feature distances


def _nearest(state: State, batch: ScoreBatch, normalized: bool, k: int) -> torch.Tensor:
    """The mean distance to the k nearest training features, from one neighbour search per batch and bank."""
    bank, bank_sq = batch.remember(batch.shared, ("bank64", normalized), lambda: _bank64(state["bank"], normalized))
    depth = min(max(k, KNN_DEPTH), len(bank))
    queries = F.normalize(batch["features"].double(), dim=1) if normalized else batch["features"]
    key = ("knn", normalized, depth)
    nearest = batch.remember(batch.memo, key, lambda: nearest_distances(bank, queries, depth, reference_sq=bank_sq))
    return nearest[:, : min(k, depth)].mean(1).float()


def _bank64(bank: torch.Tensor, normalized: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The bank in float64 (L2-normalised or raw) and its squared row norms: computed once per reference."""
    b = F.normalize(bank.double(), dim=1) if normalized else bank.double()
    return b, b.pow(2).sum(1)


def _knn(k: int, normalized: bool) -> OodScore:
    space = "L2-normalised" if normalized else "raw (not normalised)"
    family = KNN_FAMILY if normalized else RAW_KNN_FAMILY
    return OodScore(
        knn_name(k, normalized),
        f"mean Euclidean distance to the {k} nearest {space} training features",
        "feature distance",
        fit=lambda data: {"bank": data.features.float()},
        score=lambda state, batch: _nearest(state, batch, normalized, k),
        in_default=family == COMBINATION_KNN_FAMILY and k == COMBINATION_KNN_K,
        family=family,
        neighbours=k,
    )


for _k in KNN_KS:
    SCORES.register(_knn(_k, normalized=True))
for _k in KNN_KS:
    SCORES.register(_knn(_k, normalized=False))
SCORES.register_family(
    KNN_FAMILY,
    r"knn([1-9][0-9]*)",
    lambda m: _knn(int(m.group(1)), normalized=True),
    "mean Euclidean distance to the k nearest L2-normalised training features (any k)",
)
SCORES.register_family(
    RAW_KNN_FAMILY,
    r"knn([1-9][0-9]*)_raw",
    lambda m: _knn(int(m.group(1)), normalized=False),
    "mean Euclidean distance to the k nearest raw training features (any k; the default combination's k is "
    "`knn_k`, 1 unless set)",
)


SCORES.register(
    OodScore(
        "feature_norm",
        "L2 norm of the features (two-sided: too large or too small)",
        "input guard",
        fit=lambda data: {},
        score=lambda state, batch: batch["features"].norm(dim=1),
        two_sided=True,
        in_default=True,
    )
)


def _gaussian_distance(state: State, batch: ScoreBatch, output: str = "features") -> torch.Tensor:
    return Gaussian.from_state(state).distances(batch[output])


SCORES.register(
    OodScore(
        "mahalanobis",
        "squared Mahalanobis distance to the nearest class mean, pooled class covariance (Lee et al. 2018)",
        "feature distance",
        fit=lambda data: fit_gaussian(data.features, data.labels).state() if data.labeled else None,
        score=_gaussian_distance,
        in_default=True,
    )
)
SCORES.register(
    OodScore(
        "mahalanobis_classfree",
        "squared Mahalanobis distance to the mean of one Gaussian of all training features",
        "feature distance",
        fit=lambda data: fit_gaussian(data.features).state(),
        score=_gaussian_distance,
        in_default=True,
        replaces="mahalanobis",
    )
)


SCORES.register(
    OodScore(
        "input_stats",
        "squared Mahalanobis distance of 7 pixel statistics (mean, spread, saturation, edges, entropy, colour) "
        "to their training Gaussian",
        "input guard",
        fit=lambda data: fit_gaussian(data.input_stats).state(),
        score=lambda state, batch: _gaussian_distance(state, batch, "input_stats"),
        in_default=True,
    )
)


def _fit_rmd(data: FitData) -> State | None:
    if not data.labeled:
        return None
    classes = fit_gaussian(data.features, data.labels, unbiased=False)
    background = fit_gaussian(data.features[data.labels >= 0], unbiased=False)
    return {"classes": classes.state(), "background": background.state()}


def _rmd(state: State, batch: ScoreBatch) -> torch.Tensor:
    """min_k MD_k(x) - MD_0(x) (Ren et al. 2021, Eq. 4), maximum-likelihood covariances."""
    f = batch["features"]
    per_class = Gaussian.from_state(state["classes"]).class_distances(f)
    return (per_class - Gaussian.from_state(state["background"]).class_distances(f)).amin(1)


SCORES.register(
    OodScore(
        "rmd",
        "relative Mahalanobis distance: the nearest class's distance minus the class-free one (Ren et al. 2021)",
        "feature distance",
        fit=_fit_rmd,
        score=_rmd,
    )
)


# ----------------------------------------------------------------------------- classifier head


def _head_state(data: FitData) -> State | None:
    return None if data.head is None else {"head": data.head.state()}


def _logits(state: State, batch: ScoreBatch) -> torch.Tensor:
    return LinearHead.from_state(state["head"]).logits(batch["features"])


SCORES.register(
    OodScore(
        "msp",
        "negated maximum softmax probability of the linear head (Hendrycks & Gimpel 2017)",
        "classifier head",
        fit=_head_state,
        score=lambda state, batch: msp(_logits(state, batch)),
    )
)
SCORES.register(
    OodScore(
        "energy",
        "free energy -logsumexp of the linear head's logits, T = 1 (Liu et al. 2020)",
        "classifier head",
        fit=_head_state,
        score=lambda state, batch: energy(_logits(state, batch)),
    )
)
SCORES.register(
    OodScore(
        "max_logit",
        "negated maximum logit of the linear head (Hendrycks et al. 2022)",
        "classifier head",
        fit=_head_state,
        score=lambda state, batch: max_logit(_logits(state, batch)),
    )
)


def _fit_vim(data: FitData) -> State | None:
    if data.head is None:
        return None
    return {"head": data.head.state(), **fit_vim(data.features, data.head)}


SCORES.register(
    OodScore(
        "vim",
        "virtual-logit matching: the residual norm beyond the principal half of the feature space, scaled, "
        "minus logsumexp of the linear head (Wang et al. 2022)",
        "classifier head",
        fit=_fit_vim,
        score=lambda state, batch: vim_score(state, LinearHead.from_state(state["head"]), batch["features"]),
    )
)


# ----------------------------------------------------------------------------- the method's own


def vmf_kernel_density_score(
    means: torch.Tensor, bank: torch.Tensor, concentration: float, chunk: int = 256
) -> torch.Tensor:
    """-log (1/N) sum_j exp(kappa (mu . mu_j - 1)): -log of a vMF kernel density at the unit ``means``
    over the ``bank`` of unit means (the normaliser C_d(kappa) dropped: a constant per model)."""
    bank = bank.double()
    out = [
        -(torch.logsumexp(concentration * (q.double() @ bank.T - 1), dim=1) - math.log(len(bank)))
        for q in means.split(chunk)
    ]
    return torch.cat(out).float() if out else means.new_zeros(0)


SCORES.register(
    OodScore(
        "vmf_density",
        "-log of the vMF kernel density, with the encoder's concentration, of the encoder mean over the training "
        "encoder means (StochasticEncoder methods)",
        "own uncertainty",
        fit=lambda data: (
            None
            if data.encoder_means is None or data.concentration is None
            else {"bank": data.encoder_means, "concentration": data.concentration}
        ),
        score=lambda state, batch: vmf_kernel_density_score(
            batch["encoder_mean"], state["bank"], state["concentration"]
        ),
        in_default=True,
    )
)
SCORES.register(
    OodScore(
        "image_energy",
        "the model's image energy E(x) with the training images as reference (EnergyModel methods; two-sided)",
        "own uncertainty",
        fit=lambda data: None if data.energy_reference is None else {"reference": data.energy_reference},
        score=lambda state, batch: batch["image_energy"],
        two_sided=True,
        in_default=True,
    )
)

UNCERTAINTY = "uncertainty:"  # the column prefix of a HasUncertainty method's own scores


def _uncertainty(match: re.Match[str]) -> OodScore:
    name = match.group(0)
    return OodScore(
        name,
        f"the method's own uncertainty score {match.group(1)} (HasUncertainty methods; two-sided)",
        "own uncertainty",
        fit=lambda data: {} if match.group(1) in data.uncertainty_names else None,
        score=lambda state, batch: batch[name],
        two_sided=True,
        in_default=True,
        family="uncertainty:{name}",
    )


SCORES.register_family(
    "uncertainty:{name}",
    r"uncertainty:(\w+)",
    _uncertainty,
    "the method's own uncertainty score NAME (HasUncertainty methods, e.g. TaU's neg_u; two-sided)",
    members=lambda data: [f"{UNCERTAINTY}{name}" for name in data.uncertainty_names],
)
