"""The class probe of ``probcl score``'s predictions: the run's online probe, an offline logistic regression
fitted on the training features, or none. Its linear head also feeds the classifier-head OOD scores (MSP,
energy, max-logit, ViM), so it is fitted before the ID reference."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from probcl.errors import ConfigError
from probcl.eval.linear import linear_probe
from probcl.eval.ood_scores.head import LinearHead
from probcl.methods.base import SSLMethod

ONLINE = "online linear probe (trained during pretraining on detached backbone features)"


@dataclass
class FittedProbe:
    """The probe's saved tensors (offline only; the online probe lives in the model), its linear head on the
    features and what it is."""

    state: dict[str, torch.Tensor] | None
    head: LinearHead | None
    description: str | None

    def protocol(self, id_out: dict[str, torch.Tensor]) -> dict[str, Any]:
        """Its description and top-1 (%) on the held-out ID images ``id_out`` (``features``, ``labels``)."""
        labels, features = id_out["labels"], id_out["features"]
        labeled = labels >= 0
        if self.head is None or not labeled.any():
            return {"probe": self.description, "probe_test_top1": None}
        hits = self.head.logits(features[labeled]).argmax(1) == labels[labeled]
        return {"probe": self.description, "probe_test_top1": 100.0 * hits.double().mean().item()}


def fit_probe(kind: str, model: SSLMethod, bank: torch.Tensor, labels: torch.Tensor, seed: int) -> FittedProbe:
    """The probe ``kind`` (online, offline or none) of ``model``, offline fitted on the training ``bank``."""
    online = model.online_probe
    if kind == "none" or (kind == "online" and online is None):  # unlabeled pretraining: no online probe
        return FittedProbe(None, None, None)
    if kind == "online":
        assert online is not None
        return FittedProbe(None, LinearHead.of_linear(online), ONLINE)
    classes = model.data_info.num_classes
    if not (labels >= 0).all() or not classes:
        raise ConfigError("an offline probe needs a labeled training set; use --probe online or none")
    result, fitted = linear_probe(bank, labels, bank[:1], labels[:1], classes, seed=seed)  # top-1: on held-out
    description = (
        f"offline multinomial logistic regression (L-BFGS) on {len(bank)} training features, "
        f"l2 {result['protocol']['l2']}"
    )
    return FittedProbe(asdict(fitted), LinearHead.of_probe(fitted), description)
