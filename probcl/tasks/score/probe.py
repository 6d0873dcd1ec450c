"""The class probe of ``probcl score``'s predictions: the run's online probe, an offline logistic regression
fitted on the training features, or none."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import torch

from probcl.errors import ConfigError
from probcl.eval.id_reference import IdReference
from probcl.eval.linear import linear_probe
from probcl.methods.base import SSLMethod

ONLINE = "online linear probe (trained during pretraining on detached backbone features)"


def fit_probe(
    kind: str,
    model: SSLMethod,
    device: torch.device,
    reference: IdReference,
    id_out: dict[str, torch.Tensor],
    seed: int,
) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any]]:
    """The offline probe's tensors (None for ``online``/``none``) and the probe's description and test top-1 (%),
    measured on the held-out ID images ``id_out`` (their ``features`` and ``labels``, -1 = unlabeled)."""
    online = model.online_probe
    labels, features = id_out["labels"], id_out["features"]
    labeled = labels >= 0
    if kind == "none" or (kind == "online" and online is None):  # unlabeled pretraining: no online probe
        return None, {"probe": None, "probe_test_top1": None}
    if kind == "online":
        assert online is not None
        with torch.no_grad():
            hits = online(features[labeled].to(device)).argmax(1).cpu() == labels[labeled]
        top1 = 100.0 * hits.float().mean().item() if labeled.any() else None
        return None, {"probe": ONLINE, "probe_test_top1": top1}
    classes = model.data_info.num_classes
    if not (reference.labels >= 0).all() or not classes:
        raise ConfigError("an offline probe needs a labeled training set; use --probe online or none")
    result, fitted = linear_probe(reference.bank, reference.labels, features, labels, classes, seed=seed)
    return asdict(fitted), {
        "probe": f"offline multinomial logistic regression (L-BFGS) on {len(reference.bank)} "
        f"training features, l2 {result['protocol']['l2']}",
        "probe_test_top1": result["top1"],
    }
