"""Outlier scores over embeddings, and the threshold that accepts a chosen share of in-distribution data.

kNN distance (the TaU paper's kNN baseline; docs/methods/tau.md#from-the-authors-code): mean Euclidean distance from a
query to its k nearest reference embeddings (k = 10 on L2-normalized projections in the
paper). Scores are outlier scores: higher = more out-of-distribution.
"""

from __future__ import annotations

import math

import torch

from probcl.errors import ConfigError

DEFAULT_KNN_K = 10  # neighbours of the kNN distance in the default OOD combination (the TaU paper's k)
DEFAULT_TPR = 0.95  # share of held-out ID images every OOD threshold accepts


def knn_distance(
    reference: torch.Tensor, queries: torch.Tensor, k: int = DEFAULT_KNN_K, chunk: int = 256
) -> torch.Tensor:
    """Mean Euclidean distance (N_queries,) from each query to its ``k`` nearest ``reference`` rows."""
    return knn_distances(reference, queries, (k,), chunk)[k]


def knn_distances(
    reference: torch.Tensor,
    queries: torch.Tensor,
    ks: tuple[int, ...],
    chunk: int = 256,
    reference_sq: torch.Tensor | None = None,
    exclude_self: bool = False,
) -> dict[int, torch.Tensor]:
    """:func:`knn_distance` for several ``ks`` from one distance computation per chunk of queries.

    Distances are computed in float64 (close neighbours would lose most digits to cancellation in float32)
    as sqrt(|q|^2 + |r|^2 - 2 q.r), with |r|^2 computed once (or given as ``reference_sq``, for a reference
    that scores many batches): a float64 ``reference`` is used as is. With ``exclude_self`` the queries are
    the reference itself and query i never counts row i among its neighbours (the self-match removed).
    """
    if not ks or min(ks) < 1:
        raise ConfigError(f"kNN distance needs k >= 1, got {list(ks)}")
    kmax = min(max(ks), len(reference) - int(exclude_self))
    nearest = nearest_distances(reference, queries, kmax, chunk, reference_sq, exclude_self)
    return {k: nearest[:, : min(k, kmax)].mean(1).float() for k in ks}


def nearest_distances(
    reference: torch.Tensor,
    queries: torch.Tensor,
    depth: int,
    chunk: int = 256,
    reference_sq: torch.Tensor | None = None,
    exclude_self: bool = False,
) -> torch.Tensor:
    """The Euclidean distances (N_queries, depth), ascending, from each query to its ``depth`` nearest
    ``reference`` rows, in float64 (see :func:`knn_distances`)."""
    if len(reference) < 1:
        raise ConfigError("kNN distance needs at least one reference embedding")
    if exclude_self and len(queries) != len(reference):
        raise ConfigError("kNN distances without the self-match need the reference itself as the queries")
    if depth < 1:
        raise ConfigError("kNN distances without the self-match need at least two reference embeddings")
    reference, queries = reference.double(), queries.double()
    reference_sq = (reference * reference).sum(1) if reference_sq is None else reference_sq.double()
    parts = []
    for start in range(0, len(queries), chunk):
        q = queries[start : start + chunk]
        squared = ((q * q).sum(1, keepdim=True) + reference_sq - 2 * q @ reference.T).clamp_min_(0)
        if exclude_self:
            squared[:, start : start + len(q)].diagonal().fill_(torch.inf)
        parts.append(squared.topk(depth, dim=1, largest=False).values.sqrt())
    return torch.cat(parts) if parts else queries.new_zeros(0, depth)


def threshold_at_tpr(in_distribution_scores: torch.Tensor, tpr: float = DEFAULT_TPR) -> float:
    """The outlier-score threshold t (accept score <= t) that accepts a new in-distribution item with
    probability >= ``tpr``: the ceil((n + 1) tpr)-th smallest of n exchangeable ID scores (split-conformal
    quantile; +inf when n is too small for that level)."""
    if not 0 < tpr <= 1:
        raise ConfigError(f"tpr must be in (0, 1], got {tpr}")
    n = len(in_distribution_scores)
    if n == 0:
        raise ConfigError("no in-distribution scores to choose a threshold from")
    rank = math.ceil((n + 1) * tpr - 1e-9)
    if rank > n:
        return math.inf
    return float(in_distribution_scores.double().sort().values[rank - 1])
