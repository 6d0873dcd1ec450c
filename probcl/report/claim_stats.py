"""A statistics engine for claims: comparisons across seeds, each judged by two analyses, and a verdict.

A claim is one or more :class:`Comparison` s. A comparison is the difference of two *arms* (``ours - theirs``,
oriented so that *positive supports the claim*, e.g. EBCLR's linear top-1 minus SimCLR's); in one seed each arm is
a number, or ``None`` when a cell of that seed is missing. Over the seeds where every cell exists we report the mean
difference and two two-sided Student-t intervals:

- **paired**: the interval of the mean of the per-seed differences (cells of one seed share the seed);
- **Welch** (unpaired): the interval of ``mean(ours) - mean(theirs)`` with the arms' variances estimated
  separately (Welch-Satterthwaite degrees of freedom), which does not lean on the seeds' pairing. With few seeds
  the two can disagree (e.g. strongly anti-correlated arms: the paired interval is wide, Welch's narrow).

Each interval gives a verdict by the rules of :func:`verdict`:

- **reproduced**: the interval lies above 0 (above ``-margin`` for "no worse than" claims);
- **contradicted**: the interval lies below 0 (below ``-margin`` for "no worse than" claims);
- **not reproduced**: neither, and the paper's own effect size lies above the interval (an effect as
  large as the paper's is ruled out);
- **inconclusive at this budget**: anything else, including a single seed (no interval).

The comparison's verdict is the two analyses' when they agree; when they do not, it is *inconclusive at this
budget*, and the reason names both. **Multiple comparisons**: the comparisons that decide a claim (see below) form
one family of m; Holm's step-down sets their levels: ordered by p-value (the larger of the paired and the Welch
test of "no difference"), the k-th (k = 1..m) gets the level 1 - 0.05 / (m - k + 1) until one is not significant
at its level, and every later one keeps that level. Comparisons beyond the paper keep 95 %.

**Values that are not per-seed measurements** are shown as what they are: an arm that is one number in every seed
(a constant such as chance level, or the deep ensemble of all seeds, repeated in each seed's cell) is named as that
number, and both intervals are then the other arm's spread over seeds (a one-sample interval against that number);
a comparison whose value is a code in some seed (e.g. "never reached", coded 1.5) has no interval at all: it is
decided by the count of seeds, reproduced or contradicted only when every seed (two or more) lies on the same side.

**Test images' sampling.** An arm measured with a bootstrap spread over the test images (an ECE: its
``..._bootstrap.std`` beside it) has a second source of noise that seeds do not average away, because every seed
is scored on the same test images. Where both arms carry that spread in every seed, both analyses add the mean
over seeds of ``std(ours)^2 + std(theirs)^2`` to the squared standard error of the difference (degrees of freedom
unchanged). This is conservative: the per-seed part of that noise is already in the seeds' spread, and two arms'
errors on the same images are taken as uncorrelated (positively correlated errors would partly cancel).

**Which evidence decides a claim.** A claim is judged on the paper's kind of evidence only: each comparison
says whether it is of that kind (``evidence: paper``, e.g. natural-image dataset shifts such as held-out
classes and digits for an OOD claim) or a stress test the paper never ran (``evidence: beyond``, e.g.
synthetic noise). The claim's verdict is the weakest of its paper-kind comparisons' (contradicted < not
reproduced < inconclusive < reproduced); the others are reported beside it as findings beyond the paper.

Nothing here knows a paper: the claims themselves are data (:mod:`probcl.report.claims` reads them from a
benchmark config, e.g. the study's ``claims:`` section).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

Metrics = dict[str, dict[str, float]]  # group -> flat metrics of one seed's cell
Value = Callable[[Metrics], float | None]  # one number of a seed's metrics, None when a cell or metric is missing
Interval = tuple[float, float]
INCONCLUSIVE = "inconclusive at this budget"
VERDICT_ORDER = ("contradicted", "not reproduced", INCONCLUSIVE, "reproduced")
PAPER, BEYOND = "paper", "beyond"  # a comparison's kind of evidence (see the module docstring)
LEVEL = 0.95  # the intervals' level before Holm's correction


def constant(value: float) -> Value:
    """The same number in every seed."""
    return lambda m: value


@dataclass(frozen=True)
class Code:
    """A value that stands for an outcome instead of measuring it (e.g. "never reached", coded 1.5):
    ``applies(metrics of one seed)`` says whether that seed's value is the code."""

    meaning: str
    applies: Callable[[Metrics], bool]


@dataclass(frozen=True)
class Comparison:
    """``ours - theirs`` in each seed (positive supports the claim); each arm is None where a cell is missing."""

    label: str
    ours: Value
    theirs: Value = constant(0.0)
    unit: str = "points"
    margin: float = 0.0  # > 0: a "no worse than" claim, which holds when the difference exceeds -margin
    paper_effect: float | None = None  # the paper's difference in the same orientation, when it gives one
    shown: tuple[tuple[str, str], ...] = ()  # (group, metric) pairs whose means the report prints beside it
    evidence: str = PAPER  # PAPER: the kind of evidence the paper used, which decides the claim; BEYOND: a stress set
    codes: tuple[Code, ...] = ()  # the arms' coded values (a seed where one applies is not a measurement)
    # each arm's standard deviation over bootstrap resamples of the test images, in one seed (None: not measured)
    sampling: tuple[Value, Value] | None = None

    def value(self, m: Metrics) -> float | None:
        """The seed's difference ``ours - theirs`` (None when an arm is missing)."""
        a, b = self.ours(m), self.theirs(m)
        return None if a is None or b is None else a - b


@dataclass(frozen=True)
class Claim:
    paper: str
    statement: str
    paper_numbers: str  # the paper's figures and their setting
    comparisons: tuple[Comparison, ...]
    notes: str = ""


def span(interval: Interval | None) -> str:
    """``[low, high]`` with signs, or ``—``."""
    return "—" if interval is None else f"[{interval[0]:+.3g}, {interval[1]:+.3g}]"


@dataclass
class ComparisonResult:
    label: str
    unit: str
    seeds: list[int]
    differences: list[float]
    mean: float | None
    interval: Interval | None  # the paired interval
    verdict: str
    margin: float = 0.0
    paper_effect: float | None = None
    shown: tuple[tuple[str, str], ...] = ()
    evidence: str = PAPER
    welch: Interval | None = None  # the unpaired (Welch) interval
    paired_verdict: str = ""
    welch_verdict: str = ""
    p_value: float | None = None  # the larger of the two analyses' p-values of "no difference" (Holm orders by it)
    level: float = LEVEL  # both intervals' level (below 95 % never; above it after Holm's correction)
    family: int = 1  # how many comparisons share the claim's Holm correction (1: none)
    fixed: str = ""  # an arm that is one number in every seed, said in words
    coded: list[int] = field(default_factory=list)  # seeds whose value is a code, not a measurement
    code_meaning: str = ""
    sampling_std: float | None = None  # the test images' sampling spread added to both analyses (module docstring)

    @property
    def measured(self) -> bool:
        """Whether the comparison has intervals (two or more seeds, every value a per-seed measurement)."""
        return self.interval is not None

    def numbers(self) -> str:
        """``mean unit, paired [low, high], Welch [low, high]`` (with the level when Holm raised it), or what stands
        in for the intervals: one seed, or the coded seeds."""
        if self.mean is None:
            return "—"
        head = f"{self.mean:+.3g} {self.unit}"
        if self.coded:
            return f"{head}; {len(self.coded)} of {len(self.seeds)} seeds coded ({self.code_meaning}): no interval"
        if self.interval is None:
            return f"{head} (one seed: no interval)"
        text = f"{head}, paired {span(self.interval)}, Welch {span(self.welch)}"
        if self.family > 1:
            text += f" ({100 * self.level:.3g} % intervals, Holm over {self.family})"
        if self.sampling_std is not None:
            text += f" (with the test images' bootstrap spread, {self.sampling_std:.2g})"
        return text + (f"; {self.fixed}" if self.fixed else "")

    def describe(self) -> str:
        """``label: numbers`` (see :meth:`numbers`)."""
        return f"{self.label}: {self.numbers()}"

    def as_data(self) -> dict:
        """The comparison's figures as JSON-ready data (what the scripts that re-judge published claims write)."""
        return {
            "label": self.label,
            "seeds": self.seeds,
            "mean": self.mean,
            "paired": self.interval,
            "welch": self.welch,
            "level": self.level,
            "family": self.family,
            "sampling_std": self.sampling_std,
            "verdict": self.verdict,
            "numbers": self.numbers(),
        }

    def reason(self) -> str:
        """One sentence on why the verdict is what it is."""
        if self.verdict == "missing":
            return "no seed has every cell this comparison needs yet."
        n = len(self.seeds)
        if self.coded:
            return (
                f"{len(self.coded)} of {n} seeds' values are a code ({self.code_meaning}), not a measurement: no "
                f"interval; {self.verdict} by the count of seeds (decided only when all of two or more agree)."
            )
        if self.interval is None:
            return f"one seed only ({self.mean:+.3g} {self.unit}): no interval, so no verdict."
        fixed = f" ({self.fixed}: that arm has no spread over seeds, so both intervals are the other arm's)"
        level = f"{100 * self.level:.3g} %" + (f" (Holm over {self.family} comparisons)" if self.family > 1 else "")
        both = f"the {level} intervals over {n} seeds, paired {span(self.interval)} and Welch {span(self.welch)}"
        both += f" {self.unit}{fixed if self.fixed else ''}"
        if self.sampling_std is not None:
            both += f" (widened by the test images' bootstrap spread, {self.sampling_std:.2g})"
        both += ","
        if self.paired_verdict != self.welch_verdict:
            return (
                f"the two analyses disagree: paired says {self.paired_verdict}, Welch {self.welch_verdict} "
                f"({both[4:-1]}); a verdict that flips with the test is not yet a verdict."
            )
        if self.verdict == "reproduced":
            return f"{both} both lie above {-self.margin if self.margin else 0:g}."
        if self.verdict == "contradicted":
            return f"{both} both lie below {-self.margin if self.margin else 0:g}: the opposite of the claim."
        if self.verdict == "not reproduced":
            return f"{both} both include {-self.margin:g} and exclude the paper's effect ({self.paper_effect:+.3g})."
        paper = f" and the paper's effect ({self.paper_effect:+.3g})" if self.paper_effect is not None else ""
        return f"{both} both include {-self.margin if self.margin else 0:g}{paper}."


@dataclass
class ClaimResult:
    name: str
    claim: Claim
    comparisons: list[ComparisonResult] = field(default_factory=list)

    @property
    def deciding(self) -> ComparisonResult | None:
        """The comparison that decides the claim: the weakest (first in VERDICT_ORDER) of the paper-kind
        comparisons with data (stress-set comparisons are reported beside it, never decide it)."""
        found = [c for c in self.comparisons if c.verdict != "missing" and c.evidence == PAPER]
        return min(found, key=lambda c: VERDICT_ORDER.index(c.verdict)) if found else None

    @property
    def beyond_the_paper(self) -> list[ComparisonResult]:
        """The comparisons on evidence the paper did not use (synthetic stress sets): findings, not the verdict."""
        return [c for c in self.comparisons if c.evidence == BEYOND]

    @property
    def verdict(self) -> str:
        return self.deciding.verdict if self.deciding else "missing"


# the two analyses: an estimate, its standard error and degrees of freedom give an interval and a p-value


def _interval(estimate: float, se: float, df: float, level: float) -> Interval:
    from scipy import stats

    half = float(stats.t.ppf(0.5 + level / 2, df)) * se if se > 0 else 0.0
    return float(estimate - half), float(estimate + half)


def _p_value(estimate: float, se: float, df: float) -> float:
    """Two-sided p-value of "no difference" (0 or 1 when there is no spread at all)."""
    from scipy import stats

    if se == 0:
        return 0.0 if estimate != 0 else 1.0
    return float(2 * stats.t.sf(abs(estimate) / se, df))


def _paired(differences: list[float]) -> tuple[float, float, float]:
    """Estimate, standard error and degrees of freedom of the mean paired difference."""
    n = len(differences)
    return statistics.fmean(differences), statistics.stdev(differences) / math.sqrt(n), n - 1


def _welch(ours: list[float], theirs: list[float]) -> tuple[float, float, float]:
    """Estimate, standard error and Welch-Satterthwaite degrees of freedom of mean(ours) - mean(theirs)."""
    a, b = statistics.variance(ours) / len(ours), statistics.variance(theirs) / len(theirs)
    se = math.sqrt(a + b)
    df = (a + b) ** 2 / (a**2 / (len(ours) - 1) + b**2 / (len(theirs) - 1)) if se > 0 else 1.0
    return statistics.fmean(ours) - statistics.fmean(theirs), se, df


def _widened(analysis: tuple[float, float, float], variance: float) -> tuple[float, float, float]:
    """An analysis' (estimate, standard error, df) with ``variance`` added to the squared standard error."""
    estimate, se, df = analysis
    return estimate, math.sqrt(se**2 + variance), df


def t_interval(values: list[float], level: float = LEVEL) -> Interval | None:
    """Two-sided Student-t interval of the mean (the paired analysis of differences); None for fewer than two."""
    return _interval(*_paired(values), level) if len(values) >= 2 else None


def welch_interval(ours: list[float], theirs: list[float], level: float = LEVEL) -> Interval | None:
    """Two-sided Welch interval of mean(ours) - mean(theirs) (the unpaired analysis); None for fewer than two each."""
    return _interval(*_welch(ours, theirs), level) if min(len(ours), len(theirs)) >= 2 else None


def verdict(interval: Interval | None, margin: float = 0.0, paper_effect: float | None = None) -> str:
    """The verdict one interval gives (see the module docstring)."""
    if interval is None:
        return INCONCLUSIVE
    low, high = interval
    if low > -margin:
        return "reproduced"
    if high < -margin:
        return "contradicted"
    if paper_effect is not None and high < paper_effect:
        return "not reproduced"
    return INCONCLUSIVE


def count_verdict(differences: list[float], margin: float = 0.0) -> str:
    """The verdict of values that are not measurements (codes): every seed (two or more) on one side decides."""
    if len(differences) >= 2 and all(d > -margin for d in differences):
        return "reproduced"
    if len(differences) >= 2 and all(d < -margin for d in differences):
        return "contradicted"
    return INCONCLUSIVE


def _one_number(values: list[float]) -> float | None:
    """The number every seed repeats (two or more seeds), else None."""
    return values[0] if len(values) >= 2 and max(values) == min(values) else None


def judge(
    comparison: Comparison, by_seed: dict[int, Metrics], level: float = LEVEL, family: int = 1
) -> ComparisonResult:
    """Evaluate one comparison over the seeds where all its cells exist, by both analyses at ``level``."""
    seeds, ours, theirs, coded, sampling = [], [], [], [], []
    for seed in sorted(by_seed):
        m = by_seed[seed]
        a, b = comparison.ours(m), comparison.theirs(m)
        if a is None or b is None or not math.isfinite(a - b):
            continue
        seeds.append(seed)
        ours.append(float(a))
        theirs.append(float(b))
        if any(code.applies(m) for code in comparison.codes):
            coded.append(seed)
        if comparison.sampling is not None:
            spreads = [side(m) for side in comparison.sampling]
            sampling.append(None if None in spreads else sum(float(s) ** 2 for s in spreads if s is not None))
    diffs = [a - b for a, b in zip(ours, theirs)]
    c = comparison
    result = ComparisonResult(
        c.label, c.unit, seeds, diffs, statistics.fmean(diffs) if diffs else None, None, "missing", c.margin,
        c.paper_effect, c.shown, c.evidence, level=level, family=family, coded=coded,
        code_meaning="; ".join(code.meaning for code in c.codes),
    )  # fmt: skip
    if not diffs:
        return result
    mine, other = _one_number(ours), _one_number(theirs)
    result.fixed = " and ".join(
        f"{side} is one number in every seed ({value:.4g})"
        for side, value in (("ours", mine), ("the comparator", other))
        if value is not None
    )
    if coded or len(diffs) < 2:
        result.paired_verdict = result.welch_verdict = result.verdict = (
            count_verdict(diffs, c.margin) if coded else INCONCLUSIVE
        )
        return result
    paired, welch = _paired(diffs), _welch(ours, theirs)
    if sampling and None not in sampling:  # every seed measured both arms' test-image spread
        extra = statistics.fmean(v for v in sampling if v is not None)
        paired, welch = _widened(paired, extra), _widened(welch, extra)
        result.sampling_std = math.sqrt(extra)
    result.interval, result.welch = _interval(*paired, level), _interval(*welch, level)
    result.paired_verdict = verdict(result.interval, c.margin, c.paper_effect)
    result.welch_verdict = verdict(result.welch, c.margin, c.paper_effect)
    result.verdict = result.paired_verdict if result.paired_verdict == result.welch_verdict else INCONCLUSIVE
    result.p_value = max(_p_value(*paired), _p_value(*welch))
    return result


def judge_claim(name: str, claim: Claim, by_seed: dict[int, Metrics]) -> ClaimResult:
    """Every comparison of a claim; the paper-kind ones with intervals at Holm's step-down levels (module docstring)."""
    results = [judge(c, by_seed) for c in claim.comparisons]
    family = [i for i, r in enumerate(results) if r.evidence == PAPER and r.p_value is not None]
    alpha, stopped = 1 - LEVEL, None
    for k, i in enumerate(sorted(family, key=lambda i: results[i].p_value or 0.0)):
        step = stopped if stopped is not None else alpha / (len(family) - k)
        if stopped is None and (results[i].p_value or 0.0) > step:
            stopped = step
        results[i] = judge(claim.comparisons[i], by_seed, 1 - step, len(family))
    return ClaimResult(name, claim, results)


def metrics_by_seed(results: dict) -> dict[int, Metrics]:
    """{seed: {group: metrics}} of the cells that trained without error."""
    out: dict[int, Metrics] = {}
    for cell in results["cells"]:
        if not cell["error"]:
            out.setdefault(cell["seed"], {})[cell["group"]] = cell["metrics"]
    return out


def judge_claims(results: dict, claims: dict[str, Claim]) -> list[ClaimResult]:
    """The verdict of every claim on a benchmark's results.json content."""
    by_seed = metrics_by_seed(results)
    return [judge_claim(name, claim, by_seed) for name, claim in claims.items()]


# the building blocks of a comparison's arms


def metric(group: str, key: str) -> Value:
    """One group's metric in a seed (None when missing)."""

    def get(m: Metrics) -> float | None:
        value = m.get(group, {}).get(key)
        return None if value is None else float(value)

    return get


def mean_of(group: str, keys: tuple[str, ...]) -> Value:
    """The mean of several metrics of one group (None when any is missing)."""

    def get(m: Metrics) -> float | None:
        values = [metric(group, k)(m) for k in keys]
        return None if any(v is None for v in values) else statistics.fmean(v for v in values if v is not None)

    return get


def difference(ours: Value, theirs: Value, sign: float = 1.0) -> Value:
    """sign * (ours - theirs) in a seed."""

    def get(m: Metrics) -> float | None:
        a, b = ours(m), theirs(m)
        return None if a is None or b is None else sign * (a - b)

    return get


def best_of(*values: Value) -> Value:
    """The largest of several values present in a seed (None when none is)."""

    def get(m: Metrics) -> float | None:
        found = [v for v in (f(m) for f in values) if v is not None]
        return max(found) if found else None

    return get


def metric_or(group: str, key: str, default: float, requires: str) -> tuple[Value, Code]:
    """One group's metric, ``default`` when it is missing, and None unless the group has ``requires`` (e.g. EBCLR's
    epochs to SimCLR's final accuracy: "never" when absent, unknown when the efficiency suite has not run); and the
    :class:`Code` that marks the seeds where ``default`` stands in for it."""

    def get(m: Metrics) -> float | None:
        if requires not in m.get(group, {}):
            return None
        value = metric(group, key)(m)
        return default if value is None else value

    def applies(m: Metrics) -> bool:
        return requires in m.get(group, {}) and key not in m.get(group, {})

    return get, Code(f"{group} {key} absent, coded {default:g}", applies)
