"""Outlier scores over embeddings, and the threshold that accepts a chosen share of in-distribution data.

kNN distance (the TaU paper's kNN baseline; NOTES.md): mean Euclidean distance from a
query to its k nearest reference embeddings (k = 10 on L2-normalized projections in the
paper). Scores are outlier scores: higher = more out-of-distribution.
"""
from __future__ import annotations

import torch

from probcl.errors import ConfigError


def knn_distance(reference: torch.Tensor, queries: torch.Tensor, k: int = 10, chunk: int = 256) -> torch.Tensor:
    """Mean Euclidean distance (N_queries,) from each query to its ``k`` nearest ``reference`` rows.

    Distances are computed in float64: close neighbours would lose most digits to cancellation in float32.
    """
    reference, queries = reference.double(), queries.double()
    k = min(k, len(reference))
    if k < 1:
        raise ConfigError("kNN distance needs at least one reference embedding")
    out = []
    for start in range(0, len(queries), chunk):
        dist = torch.cdist(queries[start:start + chunk], reference)
        out.append(dist.topk(k, dim=1, largest=False).values.mean(1))
    return torch.cat(out).float() if out else queries.new_zeros(0, dtype=torch.float32)


def threshold_at_tpr(in_distribution_scores: torch.Tensor, tpr: float = 0.95) -> float:
    """The outlier-score threshold that accepts (score <= threshold) a ``tpr`` share of in-distribution items."""
    if not 0 < tpr <= 1:
        raise ConfigError(f"tpr must be in (0, 1], got {tpr}")
    if len(in_distribution_scores) == 0:
        raise ConfigError("no in-distribution scores to choose a threshold from")
    return float(torch.quantile(in_distribution_scores.double(), tpr))
