"""The OOD protocol pieces: calibration halves, the TaU paper's kNN on projections (self-match removed), its
MC-dropout spread, and the deep ensemble of saved probe outputs, against hand-computed values and scikit-learn."""

from __future__ import annotations

import math

import pytest
import torch
from sklearn.metrics import roc_auc_score

from probcl.errors import ConfigError
from probcl.eval.inputs import calibration_halves
from probcl.eval.ood import mc_dropout_spread, projection_knn_scores, seed_ensemble_metrics
from probcl.eval.outlier import knn_distances


def test_calibration_halves_are_the_two_halves_of_one_seeded_permutation():
    cal, held = calibration_halves(11, seed=4)
    order = torch.randperm(11, generator=torch.Generator().manual_seed(4))
    assert cal.tolist() == sorted(order[:5].tolist()) and held.tolist() == sorted(order[5:].tolist())
    assert not set(cal.tolist()) & set(held.tolist()) and len(cal) + len(held) == 11


def test_knn_distances_without_the_self_match_by_hand():
    points = torch.tensor([[0.0], [1.0], [3.0], [7.0]])
    got = knn_distances(points, points, (1, 2), exclude_self=True)
    assert got[1].tolist() == pytest.approx([1.0, 1.0, 2.0, 4.0])  # nearest *other* point
    assert got[2].tolist() == pytest.approx([2.0, 1.5, 2.5, 5.0])  # mean of the two nearest others
    with pytest.raises(ConfigError, match="reference itself"):
        knn_distances(points, points[:2], (1,), exclude_self=True)


def test_projection_knn_normalizes_and_leaves_out_each_id_images_own_match():
    angles = [0.0, 0.1, 0.3]  # unit vectors (after normalisation) on a circle: chord = 2 sin(delta / 2)
    id_proj = torch.tensor([[3 * math.cos(a), 3 * math.sin(a)] for a in angles])  # not unit: normalized first
    ood = {"far": torch.tensor([[0.0, -2.0]])}
    scores = projection_knn_scores(id_proj, ood, k=1)
    chord = lambda d: 2 * math.sin(d / 2)  # noqa: E731
    assert scores["id"].tolist() == pytest.approx([chord(0.1), chord(0.1), chord(0.2)], abs=1e-6)
    assert scores["far"].tolist() == pytest.approx([chord(math.pi / 2)], abs=1e-6)  # nearest: angle 0


def test_mc_dropout_spread_is_the_mean_over_dimensions_of_the_std_over_passes():
    passes = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]], [[1.0, 0.0]]])  # 3 passes, 1 image, 2 dims
    std = torch.tensor([1.0, 0.0, 1.0]).std().item()  # both dimensions spread alike
    assert mc_dropout_spread(passes).tolist() == pytest.approx([std])


def test_seed_ensemble_auroc_matches_scikit_learn_on_the_mean_prediction():
    g = torch.Generator().manual_seed(0)
    members = []
    for _ in range(3):
        id_probs = torch.softmax(torch.randn(40, 4, generator=g) * 3, 1)
        ood_probs = torch.softmax(torch.randn(30, 4, generator=g), 1)
        members.append({"id": id_probs, "shift": ood_probs})
    result = seed_ensemble_metrics(members)
    mean_id = torch.stack([m["id"] for m in members]).mean(0)
    mean_ood = torch.stack([m["shift"] for m in members]).mean(0)
    scores = torch.cat([-mean_id.amax(1), -mean_ood.amax(1)]).numpy()
    labels = [0] * 40 + [1] * 30
    assert result["shift"]["ensemble_msp"]["auroc"] == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    entropy = lambda p: -(p * p.log()).sum(1)  # noqa: E731
    scores = torch.cat([entropy(mean_id), entropy(mean_ood)]).numpy()
    assert result["shift"]["ensemble_entropy"]["auroc"] == pytest.approx(roc_auc_score(labels, scores), abs=1e-6)
    with pytest.raises(ConfigError, match="different images"):
        seed_ensemble_metrics([members[0], {"id": members[1]["id"][:5], "shift": members[1]["shift"]}])
