"""The shared ID reference: kNN distances, the conformal threshold, the vMF kernel density, calibration and the
flags / flagged_by of the combined score, against numpy / scikit-learn / hand-computed references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from sklearn.neighbors import NearestNeighbors

from probcl.errors import ConfigError
from probcl.eval.id_reference import IdReference
from probcl.eval.ood_scores.calibration import COMBINED, combination_weights, two_sided
from probcl.eval.ood_scores.entries import vmf_kernel_density_score
from probcl.eval.outlier import knn_distance, knn_distances, threshold_at_tpr

A, B, C = "knn1", "knn10", "knn50"  # registered one-sided scores standing in for any three


def test_knn_distances_for_several_k_match_scikit_learn():
    g = torch.Generator().manual_seed(0)
    bank, queries = torch.randn(300, 5, generator=g), torch.randn(40, 5, generator=g)
    got = knn_distances(bank, queries, (1, 7, 30), chunk=16)
    nn_index = NearestNeighbors(n_neighbors=30).fit(bank.numpy())
    dist = nn_index.kneighbors(queries.numpy())[0]
    for k in (1, 7, 30):
        np.testing.assert_allclose(got[k].numpy(), dist[:, :k].mean(1), rtol=1e-5)
    torch.testing.assert_close(knn_distance(bank, queries, 7), got[7])
    with pytest.raises(ConfigError, match="k >= 1"):
        knn_distances(bank, queries, (0,))


def test_a_knn_score_with_more_neighbours_than_fitted_features_uses_them_all_and_says_so():
    from probcl.eval.ood_scores import SCORES, FitData, ScoreBatch

    g = torch.Generator().manual_seed(0)
    features, queries = torch.randn(40, 6, generator=g), torch.randn(9, 6, generator=g)
    reference = IdReference.fit(FitData(features, torch.full((40,), -1), torch.rand(40, 7, generator=g)), knn_k=45)
    assert reference.notes == [
        f"{name}: k={k} is more than the 40 reference images, so all 40 were used as neighbours "
        "(set k to at most 40 to name the number used)"
        for name, k in (("knn50", 50), ("knn50_raw", 50), ("knn45_raw", 45))
    ]
    every = NearestNeighbors(n_neighbors=40).fit(features.numpy()).kneighbors(queries.numpy())[0].mean(1)
    got = SCORES.get("knn45_raw").score(reference.states["knn45_raw"], ScoreBatch({"features": queries}, {}))
    np.testing.assert_allclose(got.numpy(), every, rtol=1e-5)
    assert IdReference.fit(FitData(features, torch.full((40,), -1), torch.rand(40, 7)), knn_k=40).notes == [
        note for note in reference.notes if not note.startswith("knn45")
    ]


def test_threshold_is_the_split_conformal_order_statistic():
    scores = torch.arange(1, 20, dtype=torch.float32)  # n = 19: rank ceil(20 * 0.95) = 19
    assert threshold_at_tpr(scores.flip(0), 0.95) == 19.0
    assert threshold_at_tpr(scores, 0.5) == 10.0  # ceil(20 * 0.5) = 10
    assert threshold_at_tpr(scores[:10], 0.95) == math.inf  # ceil(11 * 0.95) = 11 > 10: no finite threshold


def test_vmf_kernel_density_score_matches_its_formula():
    g = torch.Generator().manual_seed(1)
    bank = torch.nn.functional.normalize(torch.randn(50, 4, generator=g), dim=1)
    means = torch.nn.functional.normalize(torch.randn(6, 4, generator=g), dim=1)
    kappa = 12.0
    expected = -(logsumexp(kappa * (means.double().numpy() @ bank.double().numpy().T - 1), axis=1) - np.log(50))
    np.testing.assert_allclose(vmf_kernel_density_score(means, bank, kappa, chunk=4).numpy(), expected, rtol=1e-5)


def synthetic_reference(names=(A, B, C)) -> IdReference:
    """A reference whose scores are given directly (calibration never touches the fitted statistics)."""
    return IdReference({name: {} for name in names})


def test_calibration_halves_flags_and_flagged_by_hand_checked():
    g = torch.Generator().manual_seed(2)
    ref = synthetic_reference()
    id_scores = {name: torch.randn(400, generator=g) for name in (A, B, C)}
    ref.calibrate(id_scores, [A, B], tpr=0.9, seed=3)
    assert ref.calibrated.sizes == {"tails": 200, "thresholds": 200}
    perm = torch.randperm(400, generator=torch.Generator().manual_seed(3))
    tails, held = perm[:200], perm[200:]

    def p_value(name, x):  # (1 + #{ID >= x}) / (1 + n) on the tails half; past its maximum an exponential tail
        ref_scores = np.sort(id_scores[name][tails].numpy().astype(np.float64))[::-1]
        x = np.asarray(x, dtype=np.float64)
        empirical = (1 + (ref_scores[None, :] >= x[:, None]).sum(1)) / 201
        beta = np.mean(ref_scores[:10] - ref_scores[10])  # the 10 (5 % of 200) largest over the 11th
        return np.where(x > ref_scores[0], np.exp(-(x - ref_scores[0]) / beta) / 201, empirical)

    # two distances (no guard): equal Bonferroni weights 1/2
    combined_held = -np.log(np.minimum(p_value(A, id_scores[A][held]), p_value(B, id_scores[B][held])) / 0.5)
    expected_threshold = np.sort(combined_held)[math.ceil(201 * 0.9) - 1]
    assert ref.thresholds[COMBINED] == pytest.approx(expected_threshold, rel=1e-6)

    new = {A: torch.tensor([10.0, 0.0, 10.0]), B: torch.tensor([0.0, 0.0, 10.0]), C: torch.tensor([9.0] * 3)}
    decision = ref.decision(new)
    np.testing.assert_allclose(decision[f"p:{A}"].numpy(), p_value(A, new[A]), rtol=1e-6)
    flags, flagged_by = ref.flags(decision)
    assert flags.tolist() == [True, False, True]
    assert flagged_by == [A, "", f"{A};{B}"]  # c is extreme too, but not in the combination
    assert ref.most_unusual(decision)[0] == A
    single_flags, single_by = ref.flags(ref.decision(new, C), C)
    assert single_flags.tolist() == [True] * 3 and single_by == [C] * 3


def test_thresholds_accept_the_promised_share_of_fresh_id_images():
    """Split-conformal: a fresh ID image is accepted with probability >= tpr, averaged over calibrations."""
    accepted = []
    for seed in range(20):
        g = torch.Generator().manual_seed(100 + seed)
        ref = synthetic_reference()
        ref.calibrate({n: torch.randn(600, generator=g) for n in (A, B, C)}, [A, B, C], 0.95, seed)
        fresh = {n: torch.randn(5000, generator=g) for n in (A, B, C)}
        accepted.append(1 - ref.flags(ref.decision(fresh))[0].float().mean().item())
    # each acceptance rate has sd ~0.013 (300 threshold images); the mean of 20 has sd ~0.003
    assert np.mean(accepted) >= 0.95 - 0.006
    assert np.mean(accepted) <= 0.95 + 0.02  # not conservative to the point of uselessness


def test_two_sided_scores_flag_both_tails_and_the_state_round_trips():
    g = torch.Generator().manual_seed(4)
    ref = synthetic_reference(("feature_norm", "knn10"))
    assert two_sided("feature_norm") and two_sided("uncertainty:neg_u") and not two_sided("knn10")
    ref.calibrate(
        {"feature_norm": torch.randn(500, generator=g) + 5, "knn10": torch.rand(500, generator=g)},
        None,
        tpr=0.95,
        seed=0,
    )
    new = {"feature_norm": torch.tensor([0.0, 5.0, 10.0]), "knn10": torch.tensor([0.5, 0.5, 0.5])}
    assert ref.flags(ref.decision(new))[0].tolist() == [True, False, True]  # too small and too large norms
    restored = IdReference.from_state(ref.state())
    for key, value in ref.decision(new).items():
        torch.testing.assert_close(restored.decision(new)[key], value)
    assert restored.thresholds == ref.thresholds and restored.combination == ref.combination
    with pytest.raises(ConfigError, match="valid for this run: feature_norm, knn10"):
        ref.calibrate({"feature_norm": torch.zeros(4), "knn10": torch.zeros(4)}, ["nope"], 0.95, 0)


def test_which_scores_a_run_gets_follows_its_labels_head_and_declared_capabilities():
    from probcl.eval.ood_scores import SCORES, FitData
    from probcl.eval.ood_scores.head import LinearHead

    g = torch.Generator().manual_seed(0)
    features, stats = torch.randn(40, 6, generator=g), torch.rand(40, 7, generator=g)
    unlabeled = FitData(features, torch.full((40,), -1), stats)
    head = LinearHead(torch.randn(3, 6, generator=g), torch.randn(3, generator=g))
    labeled = FitData(features, torch.arange(40) % 3, stats, head, uncertainty_names=["neg_u"])
    needs_labels, needs_head = {"mahalanobis", "rmd"}, {"msp", "energy", "max_logit", "vim"}
    own = {"vmf_density", "image_energy"}  # capabilities SimCLR-like data lacks
    registered = [e.name for e in SCORES.entries()]
    assert list(SCORES.available(unlabeled)) == [n for n in registered if n not in needs_labels | needs_head | own]
    with_extra = list(SCORES.available(labeled, ["knn7"]))  # the declared uncertainty joins by itself
    assert with_extra == [*(n for n in registered if n not in own), "uncertainty:neg_u", "knn7"]
    ref = IdReference.fit(labeled, knn_k=7)
    assert SCORES.default_combination(ref.score_names, ref.knn_k) == [
        "knn7_raw",
        "feature_norm",
        "mahalanobis",
        "input_stats",
        "uncertainty:neg_u",
    ]
    assert SCORES.default_combination(list(SCORES.available(unlabeled))) == [
        "knn1_raw",
        "feature_norm",
        "mahalanobis_classfree",
        "input_stats",
    ]


def test_distance_scores_get_most_of_the_false_alarm_budget():
    """Weighted Bonferroni: kNN / Mahalanobis share 95 %, the guards 5 %; one kind alone: equal weights."""
    weights = combination_weights(["knn10", "feature_norm", "mahalanobis", "input_stats", "uncertainty:neg_u"])
    assert weights == pytest.approx(
        {
            "knn10": 0.475,
            "mahalanobis": 0.475,
            "feature_norm": 0.05 / 3,
            "input_stats": 0.05 / 3,
            "uncertainty:neg_u": 0.05 / 3,
        }
    )
    assert combination_weights(["feature_norm", "input_stats"]) == {"feature_norm": 0.5, "input_stats": 0.5}
    assert combination_weights(["mahalanobis_classfree"]) == {"mahalanobis_classfree": 1.0}

    # A guard's chance tail on an ID image does not outrank a moderately far distance score:
    # p_knn = 0.01 (-log(0.01 / 0.95) = 4.55) beats p_norm = 0.002 (-log(0.002 / 0.05) = 3.22).
    ref = synthetic_reference(("knn10", "feature_norm"))
    g = torch.Generator().manual_seed(8)
    ref.calibrate(
        {"knn10": torch.rand(2000, generator=g), "feature_norm": torch.rand(2000, generator=g) + 5},
        ["knn10", "feature_norm"],
        0.95,
        0,
    )
    assert ref.protocol()["combined"].endswith("knn10 0.95, feature_norm 0.05")
    tails = ref.calibrated.combiner.tail_probabilities(
        {"knn10": torch.tensor([0.99]), "feature_norm": torch.tensor([5.0])}
    )
    decision = ref.decision({"knn10": torch.tensor([0.99]), "feature_norm": torch.tensor([5.0])})
    expected = max(-math.log(float(tails["knn10"]) / 0.95), -math.log(float(tails["feature_norm"]) / 0.05))
    assert float(decision["ood_score"]) == pytest.approx(expected, rel=1e-6)
