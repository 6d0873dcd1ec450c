"""OOD metrics against scikit-learn, score functions against their formulas, generated OOD sets."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

from probcl.data.ood_sets import generated_set
from probcl.data.sources import TensorImages
from probcl.eval.linear import LinearProbe
from probcl.eval.ood import entropy, mc_dropout_probs, mutual_information, ood_metrics
from probcl.eval.ood_scores.head import energy as energy_score
from probcl.eval.ood_scores.head import msp as msp_score


def sklearn_reference(id_scores: np.ndarray, ood_scores: np.ndarray) -> dict[str, float]:
    """OOD positive for AUROC/AUPR-out; ID positive (negated score) for AUPR-in and the ROC behind FPR95."""
    y_ood = np.r_[np.zeros(len(id_scores)), np.ones(len(ood_scores))]
    s = np.r_[id_scores, ood_scores]
    fpr, tpr, _ = roc_curve(1 - y_ood, -s, drop_intermediate=False)
    return {
        "auroc": roc_auc_score(y_ood, s),
        "aupr_in": average_precision_score(1 - y_ood, -s),
        "aupr_out": average_precision_score(y_ood, s),
        "fpr95": fpr[np.searchsorted(tpr, 0.95, side="left")],
    }


@pytest.mark.parametrize("case", ["random", "ties", "all_equal", "separable", "reversed", "tiny"])
def test_metrics_match_sklearn(case):
    rng = np.random.default_rng(0)
    if case == "random":
        id_s, ood_s = rng.normal(0, 1, 500), rng.normal(0.8, 1.3, 300)
    elif case == "ties":  # heavy ties within and across classes
        id_s, ood_s = rng.integers(0, 5, 400).astype(float), rng.integers(2, 8, 250).astype(float)
    elif case == "all_equal":
        id_s, ood_s = np.full(50, 0.3), np.full(70, 0.3)
    elif case == "separable":
        id_s, ood_s = rng.uniform(0, 1, 100), rng.uniform(2, 3, 40)
    elif case == "reversed":
        id_s, ood_s = rng.uniform(2, 3, 100), rng.uniform(0, 1, 40)
    else:
        id_s, ood_s = np.array([0.2]), np.array([0.1, 0.2])
    ours = ood_metrics(torch.tensor(id_s), torch.tensor(ood_s))
    ref = sklearn_reference(id_s, ood_s)
    for key in ref:
        assert ours[key] == pytest.approx(ref[key], abs=1e-12), key


def test_known_values():
    # separable: AUROC 1, nothing accepted; all equal: AUROC 1/2, every OOD sample accepted.
    assert ood_metrics([0.0, 0.1, 0.2], [1.0, 2.0]) == {"auroc": 1.0, "aupr_in": 1.0, "aupr_out": 1.0, "fpr95": 0.0}
    equal = ood_metrics([1.0] * 4, [1.0] * 4)
    assert equal["auroc"] == 0.5 and equal["fpr95"] == 1.0


@pytest.mark.parametrize(
    "id_s, ood_s, message",
    [
        ([], [1.0], "no in-distribution scores"),
        ([1.0], [], "no out-of-distribution scores"),
        ([1.0, float("nan")], [1.0], "NaN or infinite"),
    ],
)
def test_bad_input_is_a_clear_error(id_s, ood_s, message):
    with pytest.raises(ValueError, match=message):
        ood_metrics(torch.tensor(id_s), torch.tensor(ood_s))


def test_scores_follow_their_formulas():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.0, 0.0]])
    p = np.exp([2.0, 0.0, -1.0]) / np.exp([2.0, 0.0, -1.0]).sum()
    assert msp_score(logits).tolist() == pytest.approx([-p.max(), -1 / 3])
    assert energy_score(logits).tolist() == pytest.approx([-np.log(np.exp([2.0, 0.0, -1.0]).sum()), -np.log(3)])
    probs = torch.tensor([[[0.9, 0.1]], [[0.1, 0.9]]])  # two passes that disagree completely
    h = -(0.5 * np.log(0.5)) * 2
    h_each = -(0.9 * np.log(0.9) + 0.1 * np.log(0.1))
    assert entropy(probs.mean(0)).item() == pytest.approx(h)
    assert mutual_information(probs).item() == pytest.approx(h - h_each)


def test_mc_dropout_without_dropout_is_the_probe():
    torch.manual_seed(0)
    probe = LinearProbe(torch.randn(6), torch.rand(6) + 0.5, torch.randn(4, 6), torch.randn(4))
    features = torch.randn(10, 6)
    probs = mc_dropout_probs(probe, features, p=0.0, passes=3)
    assert torch.allclose(probs, probe.logits(features).softmax(1).expand(3, -1, -1))
    noisy = mc_dropout_probs(probe, features, p=0.5, passes=3, seed=1)
    assert not torch.allclose(noisy[0], noisy[1])
    assert torch.equal(noisy, mc_dropout_probs(probe, features, p=0.5, passes=3, seed=1))


def test_generated_sets():
    torch.manual_seed(0)
    images = torch.randint(0, 120, (64, 1, 12, 12), dtype=torch.uint8)
    reference = TensorImages(images, torch.zeros(64, dtype=torch.long), "ref")
    inverted = generated_set("inverted", reference)
    assert torch.equal(inverted.images, 255 - images) and inverted.labels() is None
    for kind in ("noise:gaussian", "noise:uniform"):
        a, b = generated_set(kind, reference, seed=3), generated_set(kind, reference, seed=3)
        assert a.images.shape == images.shape and a.images.dtype == torch.uint8
        assert torch.equal(a.images, b.images)
        assert not torch.equal(a.images, generated_set(kind, reference, seed=4).images)
    gauss = generated_set("noise:gaussian", reference).images.float()
    assert gauss.mean().item() == pytest.approx(images.float().mean().item(), abs=2.0)
    assert gauss.std().item() == pytest.approx(images.float().std().item(), rel=0.05)
    with pytest.raises(ValueError, match="unknown generated OOD set"):
        generated_set("noise:pink", reference)
