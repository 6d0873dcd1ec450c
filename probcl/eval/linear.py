"""Linear probe: multinomial logistic regression on standardized frozen features.

Fitted full-batch with L-BFGS (the classic protocol of scikit-learn's
LogisticRegression), with the L2 strength chosen on a held-out 10% of the training
features, then refitted on all of them.
"""
from __future__ import annotations

from dataclasses import dataclass

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


def fit_logistic_regression(features: torch.Tensor, labels: torch.Tensor, num_classes: int, l2: float,
                            max_iter: int = 300) -> LinearProbe:
    """Minimise mean cross-entropy + l2/2 ||W||^2 with L-BFGS (strong Wolfe line search)."""
    x = features.double()
    mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
    x = (x - mean) / std
    weight = torch.zeros(num_classes, x.shape[1], dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(num_classes, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([weight, bias], lr=1.0, max_iter=max_iter, history_size=20,
                                  tolerance_grad=1e-7, tolerance_change=1e-10, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = F.cross_entropy(x @ weight.T + bias, labels) + 0.5 * l2 * (weight ** 2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return LinearProbe(mean.float(), std.float(), weight.detach().float(), bias.detach().float())


def linear_probe(train_features: torch.Tensor, train_labels: torch.Tensor, test_features: torch.Tensor,
                 test_labels: torch.Tensor, num_classes: int, l2_grid: tuple[float, ...] = DEFAULT_L2_GRID,
                 seed: int = 0, max_iter: int = 300) -> tuple[dict, LinearProbe]:
    """Top-1/top-5 test accuracy (%) of a logistic-regression probe, and the fitted probe."""
    generator = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(train_features), generator=generator)
    n_val = max(num_classes, len(perm) // 10)
    val_idx, fit_idx = perm[:n_val], perm[n_val:]
    val_acc = {}
    for l2 in l2_grid:
        probe = fit_logistic_regression(train_features[fit_idx], train_labels[fit_idx], num_classes, l2, max_iter)
        val_acc[l2] = topk_accuracy(probe.logits(train_features[val_idx]), train_labels[val_idx], (1,))["top1"]
    best_l2 = max(l2_grid, key=lambda l2: (val_acc[l2], l2))
    probe = fit_logistic_regression(train_features, train_labels, num_classes, best_l2, max_iter)
    result = topk_accuracy(probe.logits(test_features), test_labels)
    result["protocol"] = {
        "probe": "multinomial logistic regression, standardized features, L-BFGS full batch",
        "max_iter": max_iter, "l2": best_l2, "l2_grid": list(l2_grid),
        "l2_selected_on": "10% of the training features held out", "online": False,
        "validation_top1": {str(k): v for k, v in val_acc.items()},
    }
    return result, probe
