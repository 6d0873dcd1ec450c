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

The paper's lr 5 on raw features is mis-scheduled for features of another scale: on the study's features it
leaves every probe overconfident (temperature scaling divides SimCLR's logits by ~7.8), so its ECE measures the
schedule as much as the features. :func:`sgd_heldout_probe` (the ``sgd-heldout`` probe) keeps the paper's regime
(epochs, batch, momentum, cosine decay) on standardised features and chooses the lr from :data:`HELDOUT_LRS` by the
NLL on a seeded :data:`HELDOUT_SHARE` of the *training* features (fitted on the rest; the test split is never
seen), then refits on every training feature. The ``sgd`` probe stays the paper's, for results published with it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass
from typing import Annotated, Any

import torch
import torch.nn.functional as F

from probcl.config import AtLeast, InRange, NonNegative, Positive
from probcl.errors import ConfigError
from probcl.eval.knn import topk_accuracy
from probcl.eval.linear import LinearProbe

HELDOUT_LRS = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)  # the sgd-heldout probe's lr candidates (standardised features)
HELDOUT_SHARE = 0.2  # of the training features, scoring each candidate lr


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


def select_heldout_lr(
    features: torch.Tensor, labels: torch.Tensor, num_classes: int, options: SGDProbeOptions, seed: int = 0
) -> tuple[float, dict[str, float]]:
    """The lr of :data:`HELDOUT_LRS` whose classifier (``options``' regime, standardised features, fitted on all but
    a seeded :data:`HELDOUT_SHARE` of these training features) has the lowest NLL on that share; and every
    candidate's held-out NLL (a diverged fit scores infinity)."""
    order = torch.randperm(len(features), generator=torch.Generator().manual_seed(seed))
    n_held = max(1, int(round(HELDOUT_SHARE * len(features))))
    held, fit = order[:n_held], order[n_held:]
    if len(fit) == 0:
        raise ConfigError("the sgd-heldout probe needs at least two labeled training features")
    scores = {}
    for lr in HELDOUT_LRS:
        trial = dataclasses.replace(options, lr=lr, standardize=True)
        try:
            probe = fit_sgd_classifier(features[fit], labels[fit], num_classes, trial, seed)
        except ConfigError:  # diverged at this lr
            scores[f"{lr:g}"] = math.inf
            continue
        scores[f"{lr:g}"] = float(F.cross_entropy(probe.logits(features[held]).double(), labels[held].long()))
    best = min(HELDOUT_LRS, key=lambda lr: scores[f"{lr:g}"])
    if not math.isfinite(scores[f"{best:g}"]):
        raise ConfigError(f"the sgd-heldout probe diverged at every lr of {HELDOUT_LRS}")
    return best, scores


def sgd_heldout_probe(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    test_labels: torch.Tensor,
    num_classes: int,
    options: SGDProbeOptions | None = None,
    seed: int = 0,
) -> tuple[dict, LinearProbe]:
    """Top-1/top-5 test accuracy (%) of the SGD classifier in the paper's regime on standardised features, its lr
    chosen on held-out training features (:func:`select_heldout_lr`), and the classifier."""
    o = options or SGDProbeOptions()
    labeled = train_labels >= 0
    x, y = train_features[labeled], train_labels[labeled]
    lr, scores = select_heldout_lr(x, y, num_classes, o, seed)
    chosen = dataclasses.replace(o, lr=lr, standardize=True)
    probe = fit_sgd_classifier(x, y, num_classes, chosen, seed)
    result: dict[str, Any] = dict(topk_accuracy(probe.logits(test_features), test_labels))
    result["protocol"] = {
        "probe": "linear classifier, mini-batch SGD with momentum, cosine-decayed lr, standardised features, lr "
        f"chosen by the NLL on a seeded {HELDOUT_SHARE:.0%} of the training features",
        **asdict(chosen),
        "heldout_nll_by_lr": scores,
        "online": False,
        "seed": seed,
    }
    return result, probe
