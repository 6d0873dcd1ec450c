"""Claims: the paired t-interval against scipy and a hand-computed case, the verdict rules, pairing by seed."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from probcl.report.claims import CLAIMS, Comparison, difference, judge, metric, t_interval, verdict


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


def test_every_registered_claim_names_the_paper_and_its_numbers():
    assert {CLAIMS.get(n).paper for n in CLAIMS.names()} == {"EBCLR", "VEM", "TaU", "CEB"}
    assert all(CLAIMS.get(n).paper_numbers and CLAIMS.get(n).comparisons for n in CLAIMS.names())


def test_only_the_papers_kind_of_evidence_decides_a_claim():
    """A contradicted stress-set comparison (beyond the paper) is reported, but the paper's kind decides."""
    from probcl.report.claims import Claim, ClaimResult

    by_seed = {
        s: {"tau": {"near": 0.5 + d, "noise": 0.1}, "chance": {"near": 0.5, "noise": 0.5}}
        for s, d in enumerate([0.1, 0.2, 0.15])
    }
    paper = Comparison("near OOD", difference(metric("tau", "near"), metric("chance", "near")))
    beyond = Comparison("noise", difference(metric("tau", "noise"), metric("chance", "noise")), evidence="beyond")
    claim = Claim("TaU", "detects OOD", "numbers", (paper, beyond))
    result = ClaimResult("x", claim, [judge(c, by_seed) for c in claim.comparisons])
    assert [c.verdict for c in result.comparisons] == ["reproduced", "contradicted"]
    assert result.verdict == "reproduced" and result.deciding.label == "near OOD"  # the weakest would be noise
    assert [c.label for c in result.beyond] == ["noise"]
    with pytest.raises(ValueError, match="evidence"):
        Comparison("x", metric("a", "m"), evidence="synthetic")


def test_stress_sets_and_probcls_own_baselines_never_decide_the_tau_and_vem_claims():
    deciding = {
        name: [c.label for c in CLAIMS.get(name).comparisons if c.evidence == "paper"]
        for name in ("tau-ood", "tau-posthoc", "vem-calibration")
    }
    assert all("noise" not in label and "inverted" not in label for labels in deciding.values() for label in labels)
    assert all("backbone kNN" not in label for label in deciding["tau-ood"])
    assert all("SGD probe" in label for label in deciding["vem-calibration"])  # the paper's protocol (App. D)
    assert len(deciding["tau-ood"]) == 2 and len(deciding["tau-posthoc"]) == 2  # held-out classes, digits
