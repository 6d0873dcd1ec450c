"""The ood, calibration, adversarial, corruptions, fewshot, transfer and efficiency suites on tiny real runs."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_overrides

from probcl.config import load_config
from probcl.core.io import read_json
from probcl.data.loaders import load_dataset
from probcl.data.sources import labeled_subset, random_subset
from probcl.errors import ConfigError, RunError
from probcl.eval.corruptions import corruption_errors
from probcl.eval.efficiency import epochs_to_reach, relative_efficiency
from probcl.eval.ood import method_uncertainty_fns
from probcl.eval.ood_scores import SCORES
from probcl.methods.capabilities import HasUncertainty
from probcl.tasks.evaluate import EvaluateSettings, evaluate_run
from probcl.tasks.pretrain import pretrain

MAX_TRAIN = 300


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two seeds of a tiny SimCLR run on digits, and one TaU-SimCLR run."""
    root = tmp_path_factory.mktemp("suites")
    out = {}
    for name, method, seed, extra in (
        ("simclr0", "simclr", 0, {}),
        ("simclr1", "simclr", 1, {}),
        ("tau", "tau-simclr", 0, {}),
        ("dropout", "simclr", 0, {"model.dropout2d": 0.5}),
    ):
        overrides = tiny_overrides(root / name, method=method, **{"train.seed": seed, "train.epochs": 2, **extra})
        out[name] = pretrain(load_config(None, overrides))
    return out


def test_suites_end_to_end(runs):
    run, other = runs["simclr0"], runs["simclr1"]
    options = {
        "ood": {
            "datasets": ["fashion-mnist", "noise:gaussian", "inverted"],
            "max_images": 150,
            "knn_k": [1, 10],
            "mc_passes": 5,
            "runs": [str(other)],
        },
        "calibration": {},
        "adversarial": {"max_images": 60, "pgd_steps": 2},
        "corruptions": {"max_images": 60, "corruptions": ["contrast", "gaussian_noise"], "reference": str(other)},
        "fewshot": {"fractions": [0.1, 0.5]},
        "transfer": {"datasets": ["digits"]},
        "efficiency": {"reference": str(other)},
    }
    results = evaluate_run(run, list(options), EvaluateSettings(max_train=MAX_TRAIN, options=options))
    assert set(options) <= set(read_json(run / "eval.json"))

    ood = results["ood"]
    assert set(ood["sets"]) == {"fashion-mnist", "noise:gaussian", "inverted"}
    expected_scores = {e.name for e in SCORES.entries() if e.kind != "own uncertainty"} | {  # a labeled SimCLR
        "mc_dropout_entropy",
        "mc_dropout_mi",
        "ensemble_msp",
        "combined",
        "feature_norm:two-sided",
        "knn10_projection",
    }
    for per_set in ood["sets"].values():
        assert set(per_set) == expected_scores
        for metrics in per_set.values():
            assert set(metrics) == {"auroc", "aupr_in", "aupr_out", "fpr95"}
            assert all(0.0 <= v <= 1.0 for v in metrics.values())
    assert sum(ood["histograms"]["msp"]["counts"]["id"]) == 150
    assert ood["protocol"]["ood_images"] == {"fashion-mnist": 150, "noise:gaussian": 150, "inverted": 150}

    cal = results["calibration"]
    test_size = len(load_dataset("digits", "test"))
    assert sum(cal["bins"]["count"]) == test_size and len(cal["bins"]["count"]) == 20
    assert 0 <= cal["ece"] <= cal["mce"] <= 1 and 0 <= cal["brier"] <= 2 and cal["nll"] > 0
    ts = cal["temperature_scaling"]
    assert ts["temperature"] > 0 and set(ts["before"]) == set(ts["after"]) == {"ece", "mce", "brier", "nll"}
    assert (run / "plots" / "reliability-simclr.png").stat().st_size > 1000  # drawn by the calibration hook

    adv = results["adversarial"]
    for attack in ("fgsm", "pgd"):
        assert set(adv[attack]) == {"eps4", "eps8"}
        assert adv[attack]["eps8"] <= adv["clean_top1"]
        assert set(adv[f"{attack}_robust"]) == {"eps4", "eps8"}  # robust: correct clean *and* attacked
        assert adv[f"{attack}_robust"]["eps8"] <= min(adv[attack]["eps8"], adv["clean_top1"])

    cor = results["corruptions"]
    assert set(cor["per_corruption"]) == {"contrast", "gaussian_noise"}
    assert len(cor["per_severity"]["contrast"]) == 5
    assert cor["mce"] > 0 and set(cor["ce"]) == {"contrast", "gaussian_noise"}
    assert cor["clean_top1"] == pytest.approx(adv["clean_top1"])  # same 60 seeded test images, same probe

    few = results["fewshot"]
    labels = load_dataset("digits", "train").labels()
    probe_labels = labels[random_subset(len(labels), MAX_TRAIN, 0)]  # the --max-train subset
    assert few["protocol"]["labels"] == {
        "10%": len(labeled_subset(probe_labels, 0.1)),
        "50%": len(labeled_subset(probe_labels, 0.5)),
    }
    assert 0 <= few["10%"]["top1"] <= 100 and 0 <= few["50%"]["top1"] <= 100

    assert 0 <= results["transfer"]["digits"]["top1"] <= 100
    eff = results["efficiency"]
    assert [e for e, _ in eff["curves"]["knn_top1"]] == [0, 1]
    assert eff["relative_efficiency"]["knn_top1"] in (None, 0.5, 1.0)


def test_a_knn_k_beyond_the_training_features_uses_them_all_and_the_evaluation_says_so(runs):
    def knn(k: int, plain_k: int):
        options = {"knn": {"knn_k": k, "plain_k": plain_k}}
        settings = EvaluateSettings(max_train=30, options=options, figures=False)
        return evaluate_run(runs["simclr0"], ["knn"], settings)

    clamped, explicit = knn(200, 35), knn(30, 30)
    assert clamped.notes == [
        f"knn.{name}: k={k} is more than the 30 reference images, so all 30 were used as neighbours "
        "(set k to at most 30 to name the number used)"
        for name, k in (("knn_k", 200), ("plain_k", 35))
    ]
    assert explicit.notes == []
    assert clamped["knn"]["protocol"]["weighted"].startswith("k=30,")
    assert clamped["knn"]["protocol"]["plain"].startswith("k=30,")
    assert clamped["knn"]["top1"] == explicit["knn"]["top1"]
    assert clamped["knn"]["plain_top1"] == explicit["knn"]["plain_top1"]


def test_ood_scores_are_calibrated_on_one_half_of_the_id_test_set_and_evaluated_on_the_other(runs):
    options = {"ood": {"datasets": ["inverted"], "mc_passes": 2}}
    result = evaluate_run(runs["simclr0"], ["ood"], EvaluateSettings(max_train=MAX_TRAIN, options=options))["ood"]
    half = len(load_dataset("digits", "test")) // 2  # 540 test images: 270 calibrate, the other 270 are scored
    protocol = result["protocol"]
    assert protocol["calibration_images"] == half and protocol["id_images"] == half
    assert sum(result["histograms"]["msp"]["counts"]["id"]) == half and protocol["ood_images"] == {"inverted": half}
    sizes = protocol["id_fitted"]["calibration"]
    assert f"{half // 2} for the tail distributions, {half - half // 2} for the thresholds" in sizes
    assert 0.0 <= result["id_accepted"] <= 1.0
    # the raw norm and the two-sided tail the combination uses (-log p >= 0), both reported as their own scores
    # (their AUROCs may coincide: inverted digits can be separated perfectly by either)
    assert {"feature_norm", "feature_norm:two-sided"} <= set(result["sets"]["inverted"])
    raw, two = result["histograms"]["feature_norm"]["edges"], result["histograms"]["feature_norm:two-sided"]["edges"]
    assert raw != two and two[0] >= 0.0


def test_the_tau_papers_mc_dropout_runs_on_a_model_trained_with_encoder_dropout(runs):
    from probcl.runs.loading import load_run

    model = load_run(runs["dropout"], device="cpu")
    images = load_dataset("digits", "test").images[:6]
    first, again = model.mc_dropout_projections(images, 4, seed=3), model.mc_dropout_projections(images, 4, seed=3)
    assert first.shape[:2] == (4, 6) and torch.equal(first, again)  # seeded masks
    assert (first.std(0) > 0).any() and torch.allclose(first.norm(dim=2), torch.ones(4, 6))
    assert torch.equal(model.embed(images), model.embed(images))  # outside the passes the encoder is deterministic
    settings = EvaluateSettings(max_train=MAX_TRAIN, options={"ood": {"datasets": ["inverted"], "max_images": 40}})
    result = evaluate_run(runs["dropout"], ["ood"], settings)["ood"]
    assert "mc_dropout_projection" in result["sets"]["inverted"]
    plain = evaluate_run(runs["simclr1"], ["ood"], settings)["ood"]
    assert "mc_dropout_projection" not in plain["sets"]["inverted"]  # no dropout was trained: no such score
    with pytest.raises(ConfigError, match="model.dropout2d"):
        load_run(runs["simclr1"], device="cpu").mc_dropout_projections(images, 2)


def test_method_uncertainty_enters_the_ood_suite(runs):
    result = evaluate_run(
        runs["tau"],
        ["ood"],
        EvaluateSettings(
            max_train=MAX_TRAIN,
            options={"ood": {"datasets": ["noise:uniform"], "max_images": 100, "knn_k": 10, "mc_passes": 3}},
        ),
    )
    scores = result["ood"]["sets"]["noise:uniform"]
    assert {"uncertainty:neg_u", "uncertainty:neg_u_squared"} <= set(scores)


def test_uncertainty_scores_come_from_the_declared_capability():
    class Declared(HasUncertainty):
        uncertainty_scores = ("a", "b")

        def uncertainty_batch(self, images, score):
            return images * (1 if score == "a" else 2)

    class Undeclared:  # an `uncertainty` method without the capability is not probed for
        has_uncertainty = True
        uncertainty_scores = ("a",)

        def uncertainty(self, images, score=None):
            return images

    fns = method_uncertainty_fns(Declared())
    assert list(fns) == ["uncertainty:a", "uncertainty:b"]
    assert fns["uncertainty:b"](torch.tensor([1.0, 3.0])).tolist() == [2.0, 6.0]
    assert method_uncertainty_fns(Undeclared()) == {}
    with pytest.raises(ConfigError, match="valid: a, b"):
        Declared().uncertainty(torch.ones(1), score="c")


def test_relative_efficiency_hand_computed():
    curve = [(0, 50.0), (1, 60.0), (2, 70.0), (3, 80.0)]
    assert epochs_to_reach(curve, 65.0) == 3
    assert relative_efficiency(curve, [(0, 40.0), (1, 55.0), (2, 65.0)]) == pytest.approx(3 / 3)
    assert relative_efficiency(curve, [(0, 40.0), (1, 58.0), (2, 58.0)]) == pytest.approx(2 / 3)
    assert relative_efficiency(curve, [(0, 40.0), (9, 90.0)]) is None
    with pytest.raises(RunError, match="metrics.jsonl"):
        relative_efficiency([], curve)


def test_corruption_errors_hand_computed():
    run = {"clean": 90.0, "top1": {"a": [80.0, 70.0, 60.0, 50.0, 40.0], "b": [90.0] * 5}}
    ref = {"clean": 95.0, "top1": {"a": [92.0, 88.0, 84.0, 80.0, 76.0], "b": [95.0] * 5}}
    out = corruption_errors(run, ref)
    # a: errors 20+30+40+50+60=200 vs 8+12+16+20+24=80 -> CE 250%;
    #    drops over the clean error: 200-5*10=150 vs 80-5*5=55 -> relative CE 150/55 = 272.7%
    # b: errors 50 vs 25 -> CE 200%; no drop for either run -> relative CE undefined (left out of the mean)
    assert out["ce"] == pytest.approx({"a": 250.0, "b": 200.0})
    assert out["relative_ce"]["a"] == pytest.approx(100 * 150 / 55) and out["relative_ce"]["b"] is None
    assert out["mce"] == pytest.approx(225.0) and out["relative_mce"] == pytest.approx(100 * 150 / 55)
    assert corruption_errors(run, run)["mce"] == pytest.approx(100.0)
