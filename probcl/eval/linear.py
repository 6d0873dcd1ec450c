"""Linear probe: multinomial logistic regression on standardized frozen features.

Fitted full-batch with L-BFGS (the classic protocol of scikit-learn's
LogisticRegression), with the L2 strength chosen on a held-out 10% of the training
features, then refitted on all of them. The grid runs from strong to weak regularisation,
each fit warm-started from the previous solution, which keeps the sweep cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from probcl.eval.knn import topk_accuracy

DEFAULT_L2_GRID = (1e-6, 1e-5, 1e-4, 1e-3)


@dataclass
class LinearProbe:
    """A fitted probe: standardisation statistics, weights and bias."""

    mean: torch.Tensor
    std: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        return ((features.float() - self.mean) / self.std) @ self.weight.T + self.bias


def fit_logistic_regression(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    l2: float,
    max_iter: int = 300,
    init: LinearProbe | None = None,
) -> LinearProbe:
    """Minimise mean cross-entropy + l2/2 ||W||^2 with L-BFGS (strong Wolfe line search)."""
    x = features.float()
    mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
    x = (x - mean) / std
    if init is None:
        weight = torch.zeros(num_classes, x.shape[1])
        bias = torch.zeros(num_classes)
    else:
        weight, bias = init.weight.clone(), init.bias.clone()
    weight.requires_grad_(True)
    bias.requires_grad_(True)
    optimizer = torch.optim.LBFGS(
        [weight, bias],
        lr=1.0,
        max_iter=max_iter,
        history_size=20,
        tolerance_grad=1e-6,
        tolerance_change=1e-9,
        line_search_fn="strong_wolfe",
    )

    def closure():
        optimizer.zero_grad()
        loss = F.cross_entropy(x @ weight.T + bias, labels) + 0.5 * l2 * (weight**2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return LinearProbe(mean, std, weight.detach(), bias.detach())


def linear_probe(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    test_labels: torch.Tensor,
    num_classes: int,
    l2_grid: tuple[float, ...] = DEFAULT_L2_GRID,
    seed: int = 0,
    max_iter: int = 300,
) -> tuple[dict, LinearProbe]:
    """Top-1/top-5 test accuracy (%) of a logistic-regression probe, and the fitted probe."""
    generator = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(train_features), generator=generator)
    n_val = max(num_classes, len(perm) // 10)
    val_idx, fit_idx = perm[:n_val], perm[n_val:]
    val_acc, probes, probe = {}, {}, None
    for l2 in sorted(l2_grid, reverse=True):
        probe = fit_logistic_regression(
            train_features[fit_idx], train_labels[fit_idx], num_classes, l2, max_iter, probe
        )
        probes[l2] = probe
        val_acc[l2] = topk_accuracy(probe.logits(train_features[val_idx]), train_labels[val_idx], (1,))["top1"]
    best_l2 = max(l2_grid, key=lambda l2: (val_acc[l2], l2))
    probe = fit_logistic_regression(train_features, train_labels, num_classes, best_l2, max_iter, probes[best_l2])
    result: dict[str, Any] = dict(topk_accuracy(probe.logits(test_features), test_labels))
    result["protocol"] = {
        "probe": "multinomial logistic regression, standardized features, L-BFGS full batch, warm-started grid",
        "max_iter": max_iter,
        "l2": best_l2,
        "l2_grid": list(l2_grid),
        "l2_selected_on": "10% of the training features held out",
        "online": False,
        "validation_top1": {str(k): v for k, v in val_acc.items()},
    }
    return result, probe
