"""A statistics engine for claims: paired comparisons across seeds, each with a 95 % interval and a verdict.

A claim is one or more :class:`Comparison` s. A comparison turns the metrics of one seed's cells
into one number oriented so that *positive supports the claim* (e.g. EBCLR's linear top-1 minus
SimCLR's), or into ``None`` when a cell of that seed is missing. Over the seeds where every cell
exists we report the mean difference and its two-sided 95 % Student-t interval, and a verdict:

- **reproduced**: the interval lies above 0 (above ``-margin`` for "no worse than" claims);
- **contradicted**: the interval lies below 0;
- **not reproduced**: neither, and the paper's own effect size lies above the interval (an effect as
  large as the paper's is ruled out);
- **inconclusive at this budget**: anything else, including a single seed (no interval).

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
VERDICT_ORDER = ("contradicted", "not reproduced", "inconclusive at this budget", "reproduced")
PAPER, BEYOND = "paper", "beyond"  # a comparison's kind of evidence (see the module docstring)


@dataclass(frozen=True)
class Comparison:
    """``value(metrics of one seed)`` -> the seed's difference (positive supports the claim) or None."""

    label: str
    value: Callable[[Metrics], float | None]
    unit: str = "points"
    margin: float = 0.0  # > 0: a "no worse than" claim, which holds when the difference exceeds -margin
    paper_effect: float | None = None  # the paper's difference in the same orientation, when it gives one
    shown: tuple[tuple[str, str], ...] = ()  # (group, metric) pairs whose means the report prints beside it
    evidence: str = PAPER  # PAPER: the kind of evidence the paper used, which decides the claim; BEYOND: a stress set


@dataclass(frozen=True)
class Claim:
    paper: str
    statement: str
    paper_numbers: str  # the paper's figures and their setting
    comparisons: tuple[Comparison, ...]
    notes: str = ""


@dataclass
class ComparisonResult:
    label: str
    unit: str
    seeds: list[int]
    differences: list[float]
    mean: float | None
    interval: tuple[float, float] | None
    verdict: str
    margin: float = 0.0
    paper_effect: float | None = None
    shown: tuple[tuple[str, str], ...] = ()
    evidence: str = PAPER

    def describe(self) -> str:
        """``label: mean [low, high] unit`` (the mean only with one seed)."""
        interval = f" [{self.interval[0]:+.3g}, {self.interval[1]:+.3g}]" if self.interval else ""
        mean = "—" if self.mean is None else f"{self.mean:+.3g}"
        return f"{self.label}: {mean}{interval} {self.unit}"

    def reason(self) -> str:
        """One sentence on why the verdict is what it is."""
        if self.verdict == "missing":
            return "no seed has every cell this comparison needs yet."
        if self.interval is None:
            return f"one seed only ({self.mean:+.3g} {self.unit}): no interval, so no verdict."
        low, high = self.interval
        span = f"the 95 % interval [{low:+.3g}, {high:+.3g}] {self.unit} over {len(self.seeds)} seeds"
        if self.verdict == "reproduced":
            return f"{span} lies above {-self.margin if self.margin else 0:g}."
        if self.verdict == "contradicted":
            return f"{span} lies below 0: the opposite of the claim."
        if self.verdict == "not reproduced":
            return f"{span} includes 0 and excludes the paper's effect ({self.paper_effect:+.3g})."
        return f"{span} includes 0" + (
            f" and the paper's effect ({self.paper_effect:+.3g})." if self.paper_effect is not None else "."
        )


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


def t_interval(values: list[float], level: float = 0.95) -> tuple[float, float] | None:
    """Two-sided Student-t interval of the mean; None for fewer than two values."""
    if len(values) < 2:
        return None
    from scipy import stats

    half = stats.t.ppf(0.5 + level / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    mean = statistics.fmean(values)
    return float(mean - half), float(mean + half)


def verdict(interval: tuple[float, float] | None, margin: float = 0.0, paper_effect: float | None = None) -> str:
    """The verdict of one comparison from its 95 % interval (see the module docstring)."""
    if interval is None:
        return "inconclusive at this budget"
    low, high = interval
    if low > -margin:
        return "reproduced"
    if high < 0:
        return "contradicted"
    if paper_effect is not None and high < paper_effect:
        return "not reproduced"
    return "inconclusive at this budget"


def judge(comparison: Comparison, by_seed: dict[int, Metrics]) -> ComparisonResult:
    """Evaluate one comparison over the seeds where all its cells exist."""
    seeds, diffs = [], []
    for seed in sorted(by_seed):
        value = comparison.value(by_seed[seed])
        if value is not None and math.isfinite(value):
            seeds.append(seed)
            diffs.append(float(value))
    interval = t_interval(diffs)
    result = verdict(interval, comparison.margin, comparison.paper_effect) if diffs else "missing"
    return ComparisonResult(
        comparison.label,
        comparison.unit,
        seeds,
        diffs,
        statistics.fmean(diffs) if diffs else None,
        interval,
        result,
        comparison.margin,
        comparison.paper_effect,
        comparison.shown,
        comparison.evidence,
    )


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
    return [ClaimResult(name, claim, [judge(c, by_seed) for c in claim.comparisons]) for name, claim in claims.items()]


# the building blocks of a comparison's value


def metric(group: str, key: str) -> Callable[[Metrics], float | None]:
    """One group's metric in a seed (None when missing)."""

    def get(m: Metrics) -> float | None:
        value = m.get(group, {}).get(key)
        return None if value is None else float(value)

    return get


def mean_of(group: str, keys: tuple[str, ...]) -> Callable[[Metrics], float | None]:
    """The mean of several metrics of one group (None when any is missing)."""

    def get(m: Metrics) -> float | None:
        values = [metric(group, k)(m) for k in keys]
        return None if any(v is None for v in values) else statistics.fmean(v for v in values if v is not None)

    return get


def difference(
    ours: Callable[[Metrics], float | None], theirs: Callable[[Metrics], float | None], sign: float = 1.0
) -> Callable[[Metrics], float | None]:
    """sign * (ours - theirs) in a seed."""

    def get(m: Metrics) -> float | None:
        a, b = ours(m), theirs(m)
        return None if a is None or b is None else sign * (a - b)

    return get


def best_of(*values: Callable[[Metrics], float | None]) -> Callable[[Metrics], float | None]:
    """The largest of several values present in a seed (None when none is)."""

    def get(m: Metrics) -> float | None:
        found = [v for v in (f(m) for f in values) if v is not None]
        return max(found) if found else None

    return get


def constant(value: float) -> Callable[[Metrics], float | None]:
    """The same number in every seed."""
    return lambda m: value


def metric_or(group: str, key: str, default: float, requires: str) -> Callable[[Metrics], float | None]:
    """One group's metric, ``default`` when it is missing, and None unless the group has ``requires`` (e.g. EBCLR's
    epochs to SimCLR's final accuracy: "never" when absent, unknown when the efficiency suite has not run)."""

    def get(m: Metrics) -> float | None:
        if requires not in m.get(group, {}):
            return None
        value = metric(group, key)(m)
        return default if value is None else value

    return get
