"""Claims: the paired t-interval against scipy and a hand-computed case, the verdict rules, pairing by seed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from scipy import stats

from probcl.core.presets import resolve_config_path
from probcl.errors import ConfigError
from probcl.report.claim_stats import ClaimResult, Comparison, difference, judge, metric, t_interval, verdict
from probcl.report.claims import evaluate_claims, parse_claims

ROOT = Path(__file__).resolve().parents[2]


def study_claims() -> dict:
    """The study's claims, parsed from their data in the study config."""
    config = yaml.safe_load(resolve_config_path("fashion-mnist/study").read_text())
    return parse_claims(config["claims"])


CLAIMS = study_claims()


def test_t_interval_matches_a_hand_computed_case_and_scipy():
    low, high = t_interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 / math.sqrt(3)  # t_{0.975, 2} * sd (= 1) / sqrt(3)
    assert (low, high) == pytest.approx((2 - half, 2 + half), abs=1e-9)
    values = [0.3, -0.1, 0.8, 0.5]
    ref = stats.t.interval(0.95, len(values) - 1, loc=sum(values) / 4, scale=stats.sem(values))
    assert t_interval(values) == pytest.approx(ref, abs=1e-12)
    assert t_interval([1.0]) is None


@pytest.mark.parametrize(
    "interval, margin, paper, expected",
    [
        ((0.1, 2.0), 0.0, None, "reproduced"),
        ((-2.0, -0.1), 0.0, None, "contradicted"),
        ((-0.5, 0.9), 0.0, 1.6, "not reproduced"),  # the paper's 1.6-point gain lies above the interval
        ((-0.5, 2.0), 0.0, 1.6, "inconclusive at this budget"),
        ((-0.5, 0.9), 0.0, None, "inconclusive at this budget"),
        ((-2.5, -0.4), 3.0, None, "reproduced"),  # "no worse than 3 points": holds although below 0
        (None, 0.0, None, "inconclusive at this budget"),  # one seed
    ],
)
def test_verdict_rules(interval, margin, paper, expected):
    assert verdict(interval, margin, paper) == expected


def test_comparisons_pair_cells_by_seed_and_skip_seeds_with_a_missing_cell():
    by_seed = {
        0: {"a": {"m": 80.0}, "b": {"m": 79.0}},
        1: {"a": {"m": 82.0}, "b": {"m": 80.0}},
        2: {"a": {"m": 81.0}},  # b's seed-2 cell has not run yet
        3: {"a": {"m": 83.0}, "b": {"m": 80.0}},
    }
    result = judge(Comparison("a - b", difference(metric("a", "m"), metric("b", "m"))), by_seed)
    assert result.seeds == [0, 1, 3] and result.differences == [1.0, 2.0, 3.0]
    assert result.interval == pytest.approx(t_interval([1.0, 2.0, 3.0]))
    assert result.verdict == "inconclusive at this budget"  # [-0.48, 4.48] includes 0
    assert "includes 0" in result.reason()
    assert judge(Comparison("x", metric("c", "m")), by_seed).verdict == "missing"


def test_every_study_claim_names_the_paper_and_its_numbers():
    assert {CLAIMS[n].paper for n in CLAIMS} == {"EBCLR", "VEM", "TaU", "CEB"}
    assert all(CLAIMS[n].paper_numbers and CLAIMS[n].comparisons for n in CLAIMS)


def test_claims_as_data_compute_their_values_by_hand():
    claims = parse_claims(
        {
            "c": {
                "paper": "P",
                "statement": "s",
                "paper_numbers": "n",
                "comparisons": [
                    {
                        "label": "drop",
                        "value": {
                            "minus": [
                                {"minus": [{"metric": ["a", "m"]}, {"metric": ["a2", "m"]}]},
                                {"minus": [{"metric": ["b", "m"]}, {"metric": ["b2", "m"]}]},
                            ]
                        },
                    },
                    {
                        "label": "best",
                        "value": {
                            "minus": [
                                {"mean": ["a", ["m", "k"]]},
                                {"best": [{"metric": ["b", "m"]}, {"metric": ["b", "x"]}]},
                            ]
                        },
                    },
                    {
                        "label": "never",
                        "value": {"minus": [0.5, {"metric": ["a", "eff"], "default": 1.5, "requires": "k"}]},
                        "shown": [["a", "k"]],
                    },
                ],
            }
        }
    )
    drop, best, never = claims["c"].comparisons
    seed = {"a": {"m": 90.0, "k": 80.0}, "a2": {"m": 88.0}, "b": {"m": 85.0, "x": 86.0}, "b2": {"m": 84.5}}
    assert drop.value(seed) == pytest.approx((90 - 88) - (85 - 84.5))  # 1.5
    assert best.value(seed) == pytest.approx((90 + 80) / 2 - 86)  # -1
    assert never.value(seed) == pytest.approx(0.5 - 1.5)  # no efficiency value: "never"
    assert never.value({"a": {"m": 1.0}}) is None  # requires k: not measured yet
    assert drop.shown == (("a", "m"), ("a2", "m"), ("b", "m"), ("b2", "m")) and never.shown == (("a", "k"),)


def test_stress_sets_are_reported_beside_the_verdict_never_deciding_it():
    data = {
        "paper": "P",
        "statement": "s",
        "paper_numbers": "n",
        "comparisons": [
            {"label": "a - b, digits", "value": {"minus": [{"metric": ["a", "d"]}, {"metric": ["b", "d"]}]}},
            {
                "label": "a - b, noise",
                "evidence": "beyond",
                "value": {"minus": [{"metric": ["a", "n"]}, {"metric": ["b", "n"]}]},
            },
        ],
    }
    claim = parse_claims({"c": data})["c"]
    by_seed = {s: {"a": {"d": 0.9 + s / 100, "n": 0.2}, "b": {"d": 0.8, "n": 0.9 + s / 100}} for s in range(3)}
    result = ClaimResult("c", claim, [judge(c, by_seed) for c in claim.comparisons])
    assert [c.verdict for c in result.comparisons] == ["reproduced", "contradicted"]
    assert result.verdict == "reproduced" and result.deciding.label == "a - b, digits"
    assert [c.label for c in result.beyond_the_paper] == ["a - b, noise"]
    assert CLAIMS["tau-posthoc"].comparisons[-1].evidence == "beyond"  # Gaussian noise: a set the paper never used


@pytest.mark.parametrize(
    "bad, message",
    [
        ([1], "must be a mapping"),
        ({"c": {"paper": "P"}}, "a claim has comparisons, paper, paper_numbers, statement"),
        (
            {
                "c": {
                    "paper": "P",
                    "statement": "s",
                    "paper_numbers": "n",
                    "comparisons": [{"label": "x", "value": {"plus": 1}}],
                }
            },
            r"claims\.c\.comparisons\[0\]\.value: .* is not a value; use a number or one of metric, mean, minus, best",
        ),
        (
            {
                "c": {
                    "paper": "P",
                    "statement": "s",
                    "paper_numbers": "n",
                    "comparisons": [{"label": "x", "value": 1, "evidence": "vibes"}],
                }
            },
            "evidence must be paper or beyond",
        ),
    ],
)
def test_malformed_claims_are_one_config_error(bad, message):
    with pytest.raises(ConfigError, match=message):
        parse_claims(bad)


def test_stress_sets_and_probcls_own_baselines_never_decide_the_tau_and_vem_claims():
    deciding = {
        name: [c.label for c in CLAIMS[name].comparisons if c.evidence == "paper"]
        for name in ("tau-ood", "tau-posthoc", "vem-calibration")
    }
    assert all("noise" not in label and "inverted" not in label for labels in deciding.values() for label in labels)
    assert all("backbone kNN" not in label for label in deciding["tau-ood"])
    assert all("SGD probe" in label for label in deciding["vem-calibration"])  # the paper's protocol (App. D)
    assert len(deciding["tau-ood"]) == 2 and len(deciding["tau-posthoc"]) == 2  # held-out classes, digits
    beyond = [c.label for c in CLAIMS["vem-calibration"].comparisons if c.evidence == "beyond"]
    assert beyond and all("L-BFGS probe" in label for label in beyond)  # probcl's default probe, reported beside


def test_tau_ood_is_judged_against_the_papers_comparators():
    """The deciding digits comparison: TaU's temperature minus the best of the paper's comparators (projection
    kNN, encoder MC-dropout, the seed ensemble) present in a seed; probcl's backbone kNN is beyond the paper."""
    digits = "ood/sets.digits.{}.auroc"
    near, dig = (c for c in CLAIMS["tau-ood"].comparisons if c.evidence == "paper")
    assert "near OOD" in near.label and "digits" in dig.label
    seed = {
        "tau-simclr": {digits.format("uncertainty:neg_u"): 0.80},
        "simclr": {digits.format("knn10_projection"): 0.70, digits.format("knn10"): 0.95},
        "simclr-dropout": {digits.format("mc_dropout_projection"): 0.75},
    }
    assert dig.value(seed) == pytest.approx(0.80 - 0.75)  # no ensemble yet: the best of the other two
    seed["simclr"][digits.format("ensemble_msp")] = 0.85
    assert dig.value(seed) == pytest.approx(0.80 - 0.85)
    backbone = next(c for c in CLAIMS["tau-ood"].comparisons if "backbone kNN" in c.label and "digits" in c.label)
    assert backbone.evidence == "beyond" and backbone.value(seed) == pytest.approx(0.80 - 0.95)
    assert dig.value({"tau-simclr": seed["tau-simclr"]}) is None  # no comparator measured: no difference


def test_study_claims_on_results_without_the_new_metrics_are_not_measured_rather_than_an_error():
    """The published study predates the paper's comparators and the SGD probe: those comparisons are 'missing'
    (no seed has the cells they need), the claims they decide have no verdict, the others are judged."""
    results = json.loads((ROOT / "docs" / "results" / "study-fmnist" / "results.json").read_text())
    results["config"]["claims"] = yaml.safe_load(resolve_config_path("fashion-mnist/study").read_text())["claims"]
    verdicts = {r.name: r for r in evaluate_claims(results)}
    assert set(verdicts) == set(CLAIMS)
    for name in ("tau-ood", "vem-calibration"):
        paper = [c for c in verdicts[name].comparisons if c.evidence == "paper"]
        assert all(c.verdict == "missing" and c.mean is None for c in paper)
        assert verdicts[name].verdict == "missing" and "no seed has every cell" in paper[0].reason()
    lbfgs = [c for c in verdicts["vem-calibration"].comparisons if "L-BFGS" in c.label]
    assert all(c.verdict != "missing" for c in lbfgs)  # beside the verdict, measured on every published seed
    assert verdicts["ebclr-accuracy"].verdict != "missing"
