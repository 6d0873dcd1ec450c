"""The papers' linear probe: a linear classifier trained by mini-batch SGD on frozen features.

VEM (Appendix D) trains "the linear layer ... for 200 epochs ... with a learning rate of 5 with the cosine
learning rate decay and a batch size of 256" and measures its calibration (Table 4) on that classifier; SGD
with momentum 0.9 and no weight decay on the raw (unstandardized) features is the MoCo / AdCo linear
protocol VEM inherits. probcl's default probe stays the L-BFGS logistic regression of
:mod:`probcl.eval.linear` (the optimum of a convex problem, no learning rate to tune); this one reproduces
the papers' protocol, whose classifier stops wherever the schedule leaves it, so its accuracy and ECE can
differ from the optimum's.

The objective is the mean cross-entropy + weight_decay / 2 ||W||^2 (the bias is not decayed), minimised by
SGD with momentum (PyTorch's form: v <- m v + g, w <- w - lr v, with the cross-entropy's gradient written
out) over ``epochs`` seeded shuffles of the training features, the learning rate following
lr * (1 + cos(pi * step / steps)) / 2 per step.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Annotated, Any

import torch
import torch.nn.functional as F

from probcl.config import AtLeast, InRange, NonNegative, Positive
from probcl.errors import ConfigError
from probcl.eval.knn import topk_accuracy
from probcl.eval.linear import LinearProbe


@dataclass
class SGDProbeOptions:
    """The SGD probe's settings; the defaults are VEM Appendix D's."""

    epochs: Annotated[int, AtLeast(1)] = 200  # passes over the training features
    lr: Annotated[float, Positive] = 5.0  # initial learning rate, cosine-decayed to 0
    batch_size: Annotated[int, AtLeast(1)] = 256  # features per SGD step
    momentum: Annotated[float, InRange(0.0, 1.0, high_open=True)] = 0.9  # SGD momentum
    weight_decay: Annotated[float, NonNegative] = 0.0  # L2 weight decay of the classifier
    standardize: bool = False  # the papers feed the raw features; True standardizes them as the L-BFGS probe does


def fit_sgd_classifier(
    features: torch.Tensor, labels: torch.Tensor, num_classes: int, options: SGDProbeOptions, seed: int = 0
) -> LinearProbe:
    """The linear classifier after ``options.epochs`` epochs of cosine-decayed mini-batch SGD (module docstring)."""
    o = options
    if len(features) == 0:
        raise ConfigError("the SGD linear probe needs at least one labeled training feature")
    x = features.float()
    if o.standardize:
        mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
    else:
        mean, std = torch.zeros(x.shape[1]), torch.ones(x.shape[1])
    x = (x - mean) / std
    onehot = F.one_hot(labels.long(), num_classes).float()
    weight, bias = torch.zeros(num_classes, x.shape[1]), torch.zeros(num_classes)
    v_weight, v_bias = torch.zeros_like(weight), torch.zeros_like(bias)
    per_epoch = math.ceil(len(x) / o.batch_size)
    total = o.epochs * per_epoch
    generator = torch.Generator().manual_seed(seed)
    step = 0
    for _ in range(o.epochs):
        for idx in torch.randperm(len(x), generator=generator).split(o.batch_size):
            lr = o.lr * 0.5 * (1 + math.cos(math.pi * step / total))
            xb = x[idx]
            # gradient of the batch-mean cross-entropy, written out: (softmax - onehot) / B through the linear map
            residual = ((xb @ weight.T + bias).softmax(1) - onehot[idx]) / len(idx)
            v_weight.mul_(o.momentum).add_(residual.T @ xb).add_(weight, alpha=o.weight_decay)
            v_bias.mul_(o.momentum).add_(residual.sum(0))
            weight.add_(v_weight, alpha=-lr)
            bias.add_(v_bias, alpha=-lr)
            step += 1
    if not (torch.isfinite(weight).all() and torch.isfinite(bias).all()):
        raise ConfigError(
            f"the SGD linear probe diverged at lr {o.lr:g}; lower it (--option linear.sgd.lr=...) or standardize "
            "the features (--option linear.sgd.standardize=true)"
        )
    return LinearProbe(mean, std, weight, bias)


def sgd_linear_probe(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    test_labels: torch.Tensor,
    num_classes: int,
    options: SGDProbeOptions | None = None,
    seed: int = 0,
) -> tuple[dict, LinearProbe]:
    """Top-1/top-5 test accuracy (%) of the SGD-trained linear classifier, and the classifier."""
    o = options or SGDProbeOptions()
    labeled = train_labels >= 0
    probe = fit_sgd_classifier(train_features[labeled], train_labels[labeled], num_classes, o, seed)
    result: dict[str, Any] = dict(topk_accuracy(probe.logits(test_features), test_labels))
    result["protocol"] = {
        "probe": "linear classifier, mini-batch SGD with momentum, cosine-decayed lr (VEM Appendix D)",
        **asdict(o),
        "online": False,
        "seed": seed,
    }
    return result, probe
