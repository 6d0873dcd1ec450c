"""k-nearest-neighbour classification of frozen features.

Weighted kNN (Wu et al. 2018, InstDisc; lightly/solo-learn default): cosine similarity,
top-k neighbours vote for their class with weight exp(sim / T). Plain kNN: majority
vote of the k nearest neighbours under Euclidean distance.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def weighted_knn_scores(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    num_classes: int,
    k: int = 200,
    temperature: float = 0.1,
    chunk: int = 1024,
    exclude_self: bool = False,
) -> torch.Tensor:
    """Class scores (N_test, C): sum over the k most cosine-similar training items of exp(sim/T)."""
    train = F.normalize(train_features.float(), dim=1)
    test = F.normalize(test_features.float(), dim=1)
    k = min(k, len(train) - int(exclude_self))
    scores = []
    for start in range(0, len(test), chunk):
        sim = test[start : start + chunk] @ train.T
        if exclude_self:
            rows = torch.arange(sim.shape[0])
            sim[rows, rows + start] = float("-inf")
        top_sim, top_idx = sim.topk(k, dim=1)
        weights = (top_sim / temperature).exp()
        votes = torch.zeros(sim.shape[0], num_classes, dtype=weights.dtype)
        votes.scatter_add_(1, train_labels[top_idx], weights)
        scores.append(votes)
    return torch.cat(scores)


def plain_knn_predict(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    num_classes: int,
    k: int = 20,
    chunk: int = 1024,
) -> torch.Tensor:
    """Majority vote of the k Euclidean-nearest training items (ties: lowest class id)."""
    train, test = train_features.float(), test_features.float()
    predictions = []
    for start in range(0, len(test), chunk):
        dist = torch.cdist(test[start : start + chunk], train)
        idx = dist.topk(min(k, len(train)), dim=1, largest=False).indices
        counts = torch.zeros(idx.shape[0], num_classes)
        counts.scatter_add_(1, train_labels[idx], torch.ones_like(idx, dtype=counts.dtype))
        predictions.append(counts.argmax(1))
    return torch.cat(predictions)


def topk_accuracy(scores: torch.Tensor, labels: torch.Tensor, ks: tuple[int, ...] = (1, 5)) -> dict[str, float]:
    """Top-k accuracies (in %) of class scores (N, C)."""
    out = {}
    for k in ks:
        if k > scores.shape[1]:
            continue
        top = scores.topk(k, dim=1).indices
        out[f"top{k}"] = 100.0 * (top == labels[:, None]).any(1).float().mean().item()
    return out
