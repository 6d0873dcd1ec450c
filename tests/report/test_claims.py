"""Claims: the paired and the Welch t-intervals against scipy and a hand-computed case, the verdict rules (the two
analyses must agree; Holm's correction inside a claim; coded and repeated values get no spread), pairing by seed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from scipy import stats

from probcl.core.presets import resolve_config_path
from probcl.errors import ConfigError
from probcl.report.claim_stats import (
    INCONCLUSIVE,
    Claim,
    ClaimResult,
    Comparison,
    constant,
    judge,
    judge_claim,
    metric,
    t_interval,
    verdict,
    welch_interval,
)
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
        # "no worse than 3 points" is contradicted only below -3: an interval wholly below 0 but reaching above -3
        # neither holds nor refutes it (the old rule called it contradicted as soon as it lay below 0)
        ((-4.0, -1.0), 3.0, None, INCONCLUSIVE),
        ((-4.0, -3.5), 3.0, None, "contradicted"),
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
    result = judge(Comparison("a - b", metric("a", "m"), metric("b", "m")), by_seed)
    assert result.seeds == [0, 1, 3] and result.differences == [1.0, 2.0, 3.0]
    assert result.interval == pytest.approx(t_interval([1.0, 2.0, 3.0]))
    assert result.welch == pytest.approx(welch_interval([80.0, 82.0, 83.0], [79.0, 80.0, 80.0]))
    assert result.verdict == "inconclusive at this budget"  # [-0.48, 4.48] includes 0
    assert "both include 0" in result.reason()
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


def _arms(ours: list[float], theirs: list[float]) -> dict[int, dict]:
    return {s: {"a": {"m": a}, "b": {"m": b}} for s, (a, b) in enumerate(zip(ours, theirs))}


A_MINUS_B = Comparison("a - b", metric("a", "m"), metric("b", "m"))


@pytest.mark.parametrize(
    "ours, theirs",
    [
        ([10.0, 11.0, 12.0], [8.5, 7.5, 6.5]),  # anti-correlated arms: paired wide, Welch narrow
        ([80.1, 81.7, 79.2, 80.9], [79.0, 80.8, 78.4, 79.5]),  # correlated arms: paired narrow, Welch wide
    ],
)
def test_both_intervals_match_scipy(ours, theirs):
    result = judge(A_MINUS_B, _arms(ours, theirs))
    paired = stats.ttest_rel(ours, theirs).confidence_interval(0.95)
    welch = stats.ttest_ind(ours, theirs, equal_var=False).confidence_interval(0.95)
    assert result.interval == pytest.approx((paired.low, paired.high), abs=1e-9)
    assert result.welch == pytest.approx((welch.low, welch.high), abs=1e-9)
    assert welch_interval(ours, theirs, 0.9) == pytest.approx(
        tuple(stats.ttest_ind(ours, theirs, equal_var=False).confidence_interval(0.9)), abs=1e-9
    )


def test_when_the_analyses_disagree_the_verdict_is_inconclusive_and_says_why():
    # differences 1.5, 3.5, 5.5: paired 3.5 +- 4.303 * 2 / sqrt(3) = [-1.47, +8.47] includes 0; Welch: se sqrt(2/3),
    # 4 degrees of freedom, 3.5 +- 2.776 * 0.816 = [+1.23, +5.77] above 0
    result = judge(A_MINUS_B, _arms([10.0, 11.0, 12.0], [8.5, 7.5, 6.5]))
    assert (result.paired_verdict, result.welch_verdict) == (INCONCLUSIVE, "reproduced")
    assert result.verdict == INCONCLUSIVE
    assert "the two analyses disagree" in result.reason() and "Welch reproduced" in result.reason()
    assert "paired [-1.47, +8.47], Welch [+1.23, +5.77]" in result.describe()
    # agreeing analyses decide: shift the arms apart until both intervals lie above 0
    agreed = judge(A_MINUS_B, _arms([20.0, 21.0, 22.0], [8.5, 7.5, 6.5]))
    assert (agreed.paired_verdict, agreed.welch_verdict, agreed.verdict) == ("reproduced",) * 3


@pytest.mark.parametrize("name", ["study-fmnist-v2", "study-fmnist-long"])
def test_no_published_verdict_stands_on_one_analysis(name):
    """Over every comparison of the published studies: a comparison the two analyses judge differently is
    inconclusive, and at least one does disagree at 4,680 steps (VEM-Langevin - SimCLR's anti-correlated seeds)."""
    results = json.loads((ROOT / "docs" / "results" / name / "results.json").read_text())
    comparisons = [c for r in evaluate_claims(results) for c in r.comparisons if c.verdict != "missing"]
    split = [c for c in comparisons if c.paired_verdict != c.welch_verdict]
    assert all(c.verdict == INCONCLUSIVE for c in split)
    assert all(c.verdict == c.paired_verdict for c in comparisons if c not in split)
    if name == "study-fmnist-long":
        vem = next(c for c in split if c.label.startswith("VEM-Langevin - SimCLR, linear"))
        assert vem.interval == pytest.approx((-1.26, 0.105), abs=0.01) and vem.welch == pytest.approx(
            (-0.893, -0.266), abs=0.01
        )  # the independent recomputation: [-1.26, +0.11] paired, [-0.89, -0.27] Welch


def test_holm_corrects_the_comparisons_that_decide_a_claim():
    """Two deciding comparisons and one beyond the paper: the smaller p-value's intervals at 97.5 %, then, since it
    is significant at 0.025, the other's at 95 %; the stress set keeps 95 % and does not count."""
    strong = ([90.0, 91.0, 92.0, 91.5], [80.0, 80.5, 81.0, 80.2])  # p ~ 1e-4 either way
    weak = ([80.0, 81.5, 79.0, 80.9], [79.8, 80.0, 79.5, 80.1])
    by_seed = {
        s: {"a": {"m": strong[0][s], "w": weak[0][s]}, "b": {"m": strong[1][s], "w": weak[1][s]}} for s in range(4)
    }
    weak_cmp = Comparison("weak", metric("a", "w"), metric("b", "w"))
    beyond = Comparison("noise", metric("a", "w"), metric("b", "w"), evidence="beyond")
    result = judge_claim("c", Claim("P", "s", "n", (weak_cmp, A_MINUS_B, beyond)), by_seed)
    weak_r, strong_r, beyond_r = result.comparisons
    assert (strong_r.level, weak_r.level, beyond_r.level) == pytest.approx((0.975, 0.95, 0.95))
    assert strong_r.family == weak_r.family == 2 and beyond_r.family == 1
    ref = stats.ttest_rel(*strong).confidence_interval(0.975)
    assert strong_r.interval == pytest.approx((ref.low, ref.high), abs=1e-9)
    assert "(97.5 % intervals, Holm over 2)" in strong_r.describe()
    # when the smallest p-value is not significant at 0.05 / 2, every deciding comparison keeps 97.5 %
    flat = {s: {"a": {"m": weak[0][s], "w": weak[0][s]}, "b": {"m": weak[1][s], "w": weak[1][s]}} for s in range(4)}
    levels = [c.level for c in judge_claim("c", Claim("P", "s", "n", (weak_cmp, A_MINUS_B)), flat).comparisons]
    assert levels == pytest.approx([0.975, 0.975])


def test_coded_values_get_no_interval_and_a_repeated_comparator_is_named_as_one_number():
    never = parse_claims(
        {
            "c": {
                "paper": "P",
                "statement": "s",
                "paper_numbers": "n",
                "comparisons": [
                    {
                        "label": "never",
                        "value": {"minus": [0.5, {"metric": ["a", "eff"], "default": 1.5, "requires": "k"}]},
                    }
                ],
            }
        }
    )["c"].comparisons[0]
    all_never = {s: {"a": {"k": 70.0}} for s in range(3)}
    result = judge(never, all_never)
    assert result.interval is None and result.welch is None and result.coded == [0, 1, 2]
    assert result.verdict == "contradicted" and "3 of 3 seeds coded" in result.describe()  # -1 in every seed
    mixed = {**all_never, 2: {"a": {"k": 70.0, "eff": 0.2}}}  # one seed reached it at 20 % of the epochs
    assert judge(never, mixed).verdict == INCONCLUSIVE and judge(never, mixed).coded == [0, 1]
    # the comparator repeats one number (the seed ensemble, or chance): both intervals are our arm's one-sample one
    ours = [0.61, 0.66, 0.58]
    chance = judge(
        Comparison("a - 0.5", metric("a", "m"), constant(0.5)), {s: {"a": {"m": v}} for s, v in enumerate(ours)}
    )
    ref = stats.ttest_1samp(ours, 0.5).confidence_interval(0.95)
    assert chance.interval == pytest.approx((ref.low - 0.5, ref.high - 0.5))
    assert chance.welch == pytest.approx(chance.interval)
    assert "the comparator is one number in every seed (0.5)" in chance.describe()


def test_an_ece_comparison_adds_the_test_images_bootstrap_spread_to_both_analyses():
    """ECE arms with `ece_bootstrap.std` beside them: se^2 + mean over seeds of (std_ours^2 + std_theirs^2), the
    degrees of freedom of each analysis kept; computed here from scipy's t quantiles by hand."""
    claims = parse_claims(
        {
            "c": {
                "paper": "p",
                "statement": "s",
                "paper_numbers": "n",
                "comparisons": [
                    {
                        "label": "ECE",
                        "value": {
                            "minus": [{"metric": ["b", "calibration/ece"]}, {"metric": ["a", "calibration/ece"]}]
                        },
                    }
                ],
            }
        }
    )
    comparison = claims["c"].comparisons[0]
    ours, theirs = [0.030, 0.034, 0.029], [0.020, 0.021, 0.025]  # b, a
    spread_b, spread_a = [0.002, 0.003, 0.002], [0.001, 0.002, 0.002]
    by_seed = {
        s: {
            "a": {"calibration/ece": theirs[s], "calibration/ece_bootstrap.std": spread_a[s]},
            "b": {"calibration/ece": ours[s], "calibration/ece_bootstrap.std": spread_b[s]},
        }
        for s in range(3)
    }
    result = judge(comparison, by_seed)
    extra = sum(x**2 + y**2 for x, y in zip(spread_b, spread_a)) / 3
    diffs = [o - t for o, t in zip(ours, theirs)]
    mean = sum(diffs) / 3
    se_paired = math.sqrt(stats.tstd(diffs) ** 2 / 3 + extra)
    half = stats.t.ppf(0.975, 2) * se_paired
    assert result.interval == pytest.approx((mean - half, mean + half), abs=1e-12)
    va, vb = stats.tvar(ours) / 3, stats.tvar(theirs) / 3
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)
    half_welch = stats.t.ppf(0.975, df) * math.sqrt(va + vb + extra)
    assert result.welch == pytest.approx((mean - half_welch, mean + half_welch), abs=1e-12)
    assert result.sampling_std == pytest.approx(math.sqrt(extra)) and "bootstrap spread" in result.reason()
    # one seed without the spread: no widening at all (the analyses are the seeds' alone)
    del by_seed[1]["a"]["calibration/ece_bootstrap.std"]
    plain = judge(comparison, by_seed)
    paired = stats.ttest_rel(ours, theirs).confidence_interval(0.95)
    assert plain.sampling_std is None and plain.interval == pytest.approx((paired.low, paired.high), abs=1e-12)
    # a metric without a bootstrap (accuracy) is never widened
    assert judge(A_MINUS_B, _arms(ours, theirs)).sampling_std is None
