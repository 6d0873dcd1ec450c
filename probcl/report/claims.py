"""The papers' claims as paired comparisons across seeds, each with a verdict.

A claim is one or more :class:`Comparison` s. A comparison turns the metrics of one seed's cells
into one number oriented so that *positive supports the claim* (e.g. EBCLR's linear top-1 minus
SimCLR's), or into ``None`` when a cell of that seed is missing. Over the seeds where every cell
exists we report the mean difference and its two-sided 95 % Student-t interval, and a verdict:

- **reproduced**: the interval lies above 0 (above ``-margin`` for "no worse than" claims);
- **contradicted**: the interval lies below 0;
- **not reproduced**: neither, and the paper's own effect size lies above the interval (an effect as
  large as the paper's is ruled out);
- **inconclusive at this budget**: anything else, including a single seed (no interval).

**Which evidence decides a claim.** A claim is judged on the paper's kind of evidence only: the paper's
protocol (e.g. VEM's ECE of an SGD-trained linear classifier) and the paper's kind of data (the TaU paper's
OOD sets are natural-image dataset shifts, so here held-out classes and digits, not generated images).
Comparisons of that kind (``evidence="paper"``) decide: the claim's verdict is the weakest of theirs
(contradicted < not reproduced < inconclusive < reproduced). Every other comparison (``evidence="beyond"``:
synthetic stress sets such as Gaussian noise or inverted images, probcl's own stronger baselines and
protocols) is judged the same way but reported beside the claim as a finding *beyond the paper*, never
folded into its verdict. Each claim carries the paper's numbers and setting, which differ from ours
(datasets, networks, epochs): the verdict is about the direction and size of the effect at our budget.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from probcl.core.registry import Registry

Metrics = dict[str, dict[str, float]]  # group -> flat metrics of one seed's cell
VERDICT_ORDER = ("contradicted", "not reproduced", "inconclusive at this budget", "reproduced")
NEAR_OOD = "fashion-mnist:classes=8-9"
EVIDENCE = ("paper", "beyond")  # the paper's kind of evidence (decides), or beyond the paper (reported beside)
EVIDENCE_LABELS = {"paper": "the paper's kind (decides)", "beyond": "beyond the paper (reported, not deciding)"}
LIPSCHITZ_KEYS = ("lipschitz/brightness+", "lipschitz/brightness-", "lipschitz/contrast+", "lipschitz/contrast-")


@dataclass(frozen=True)
class Comparison:
    """``value(metrics of one seed)`` -> the seed's difference (positive supports the claim) or None."""

    label: str
    value: Callable[[Metrics], float | None]
    unit: str = "points"
    margin: float = 0.0  # > 0: a "no worse than" claim, which holds when the difference exceeds -margin
    paper_effect: float | None = None  # the paper's difference in the same orientation, when it gives one
    shown: tuple[tuple[str, str], ...] = ()  # (group, metric) pairs whose means the report prints beside it
    evidence: str = "paper"  # "paper": decides the claim; "beyond": reported beside it (module docstring)

    def __post_init__(self) -> None:
        if self.evidence not in EVIDENCE:
            raise ValueError(f"evidence must be one of {', '.join(EVIDENCE)}, got {self.evidence!r}")


@dataclass(frozen=True)
class Claim:
    paper: str
    statement: str
    paper_numbers: str  # the paper's figures and their setting
    comparisons: tuple[Comparison, ...]
    notes: str = ""


CLAIMS: Registry[Claim] = Registry("claims")


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
    evidence: str = "paper"

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
        """The comparison that decides the claim: the weakest (first in VERDICT_ORDER) of the paper's kind of
        evidence with data (comparisons beyond the paper never decide)."""
        found = [c for c in self.comparisons if c.verdict != "missing" and c.evidence == "paper"]
        return min(found, key=lambda c: VERDICT_ORDER.index(c.verdict)) if found else None

    @property
    def beyond(self) -> list[ComparisonResult]:
        """The comparisons beyond the paper (synthetic stress sets, probcl's own baselines), with data."""
        return [c for c in self.comparisons if c.verdict != "missing" and c.evidence == "beyond"]

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


def evaluate_claims(results: dict, names: list[str]) -> list[ClaimResult]:
    """The verdict of every named claim on a benchmark's results.json content."""
    by_seed = metrics_by_seed(results)
    return [
        ClaimResult(name, CLAIMS.get(name), [judge(c, by_seed) for c in CLAIMS.get(name).comparisons]) for name in names
    ]


# ----------------------------------------------------------------------------- building blocks


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
    return lambda m: value


def higher(ours: str, theirs: str, key: str, label: str, paper_effect: float | None = None) -> Comparison:
    """ours - theirs on one metric where higher is better."""
    return Comparison(
        label,
        difference(metric(ours, key), metric(theirs, key)),
        paper_effect=paper_effect,
        shown=((ours, key), (theirs, key)),
    )


def lower(ours: str, theirs: str, key: str, label: str, unit: str, evidence: str = "paper") -> Comparison:
    """theirs - ours on one metric where lower is better."""
    return Comparison(
        label,
        difference(metric(theirs, key), metric(ours, key)),
        unit=unit,
        shown=((ours, key), (theirs, key)),
        evidence=evidence,
    )


def ood_auroc(group: str, ood_set: str, score: str) -> Callable[[Metrics], float | None]:
    return metric(group, f"ood/sets.{ood_set}.{score}.auroc")


# ----------------------------------------------------------------------------- the four papers' claims


def _ebclr_vs(baseline: str, name: str, paper_gap: float) -> tuple[Comparison, ...]:
    return (
        higher("ebclr", baseline, "linear/top1", f"EBCLR - {name}, linear top-1", paper_gap),
        higher("ebclr", baseline, "knn/top1", f"EBCLR - {name}, kNN top-1"),
    )


CLAIMS.register("ebclr-accuracy")(
    Claim(
        "EBCLR",
        "Higher linear and kNN accuracy than SimCLR, MoCo v2, BYOL and SimSiam at equal epochs.",
        "FMNIST linear top-1, ResNet-18, 100 epochs (Table 1): EBCLR 90.1, SimCLR 88.5, MoCo v2 87.8, BYOL 89.0, "
        "SimSiam 87.4",
        _ebclr_vs("simclr", "SimCLR", 1.6)
        + _ebclr_vs("moco", "MoCo v2", 2.3)
        + _ebclr_vs("byol", "BYOL", 1.1)
        + _ebclr_vs("simsiam", "SimSiam", 2.7),
    )
)


def _ebclr_speedup(m: Metrics) -> float | None:
    """0.5 - EBCLR's relative efficiency against SimCLR (kNN monitor): positive when EBCLR reaches SimCLR's
    final accuracy in under half of the epochs; -0.5 when it never does."""
    if "ebclr" not in m or "efficiency/final.knn_top1" not in m["ebclr"]:
        return None
    value = m["ebclr"].get("efficiency/relative_efficiency.knn_top1")
    return 0.5 - (1.5 if value is None else float(value))


CLAIMS.register("ebclr-efficiency")(
    Claim(
        "EBCLR",
        "Far better sample efficiency: reaches SimCLR's final accuracy in a fraction of the epochs.",
        "FMNIST relative efficiency of SimCLR 0.15 (EBCLR needs 15 % of SimCLR's epochs; Table 1)",
        (
            Comparison(
                "0.5 - EBCLR's epochs to SimCLR's final kNN (fraction of SimCLR's epochs; never = 1.5)",
                _ebclr_speedup,
                unit="fraction",
                paper_effect=0.35,
                shown=(("ebclr", "efficiency/final.knn_top1"), ("simclr", "efficiency/final.knn_top1")),
            ),
        ),
        notes="Epoch resolution is 1 / epochs of the budget; the monitor's kNN accuracy is on a seeded subset.",
    )
)


def _flatness(batch: int) -> Comparison:
    drop = lambda method: difference(metric(method, "linear/top1"), metric(f"{method}-b{batch}", "linear/top1"))  # noqa: E731
    return Comparison(
        f"SimCLR's drop - EBCLR's drop, linear top-1, batch 128 -> {batch}",
        difference(drop("simclr"), drop("ebclr")),
        paper_effect={16: 0.6, 64: 0.5}.get(batch),
        shown=(
            ("simclr", "linear/top1"),
            (f"simclr-b{batch}", "linear/top1"),
            ("ebclr", "linear/top1"),
            (f"ebclr-b{batch}", "linear/top1"),
        ),
    )


CLAIMS.register("ebclr-batch")(
    Claim(
        "EBCLR",
        "Accuracy nearly flat across batch sizes 16 / 64 / 128, where SimCLR degrades.",
        "FMNIST linear top-1 at batch 16 / 64 / 128 (Table 3): SimCLR 87.1 / 88.0 / 88.2, EBCLR 89.6 / 90.4 / 90.1",
        (_flatness(16), _flatness(64)),
    )
)

CLAIMS.register("vem-accuracy")(
    Claim(
        "VEM",
        "Higher linear accuracy than the base method (SimCLR).",
        "CIFAR-10 / CIFAR-100, ResNet-50 (Table 1): SimCLR 92.65 / 69.94, VEM-Langevin 93.26 / 72.59, "
        "VEM-SVGD 93.23 / 72.79",
        (
            higher("vem-langevin", "simclr", "linear/top1", "VEM-Langevin - SimCLR, linear top-1", 0.6),
            higher("vem-svgd", "simclr", "linear/top1", "VEM-SVGD - SimCLR, linear top-1", 0.6),
        ),
    )
)

CLAIMS.register("vem-calibration")(
    Claim(
        "VEM",
        "Lower expected calibration error (ECE) of the linear classifier than SimCLR.",
        "CIFAR-10, ResNet-18 (Table 4): ECE SimCLR 0.0129, VEM-Langevin 0.0084, of a linear classifier trained "
        "by SGD (Appendix D: 200 epochs, lr 5, cosine)",
        (
            lower("vem-langevin", "simclr", "calibration/sgd.ece", "SimCLR - VEM-Langevin, ECE (SGD probe)", "ECE"),
            lower("vem-svgd", "simclr", "calibration/sgd.ece", "SimCLR - VEM-SVGD, ECE (SGD probe)", "ECE"),
            lower(
                "vem-langevin",
                "simclr",
                "calibration/ece",
                "SimCLR - VEM-Langevin, ECE (L-BFGS probe)",
                "ECE",
                "beyond",
            ),
            lower("vem-svgd", "simclr", "calibration/ece", "SimCLR - VEM-SVGD, ECE (L-BFGS probe)", "ECE", "beyond"),
        ),
        notes="Decided on the paper's SGD-trained classifier (the calibration suite's `sgd` probe); probcl's "
        "default L-BFGS logistic regression, the optimum of the same convex problem, is reported beside it.",
    )
)


# The TaU paper's comparators (Table 1; the authors' code, NOTES.md): kNN on L2-normalized projections (k 10,
# self-match removed) and a deep ensemble of SimCLR's seeds, on the SimCLR cells; MC-dropout (channel dropout
# 0.5 in the encoder, 10 passes) on a SimCLR trained with that dropout (the `simclr-dropout` cells).
TAU_COMPARATORS = (
    ("simclr", "knn10_projection"),
    ("simclr-dropout", "mc_dropout_projection"),
    ("simclr", "ensemble_msp"),
)


def _tau_competitive(ood_set: str, label: str, evidence: str = "paper") -> Comparison:
    baselines = best_of(*(ood_auroc(group, ood_set, score) for group, score in TAU_COMPARATORS))
    return Comparison(
        f"TaU temperature - best of the paper's SimCLR kNN (projection) / MC-dropout / ensemble, AUROC {label}",
        difference(ood_auroc("tau-simclr", ood_set, "uncertainty:neg_u"), baselines),
        unit="AUROC",
        margin=0.02,
        shown=(
            ("tau-simclr", f"ood/sets.{ood_set}.uncertainty:neg_u.auroc"),
            *((group, f"ood/sets.{ood_set}.{score}.auroc") for group, score in TAU_COMPARATORS),
        ),
        evidence=evidence,
    )


def _tau_vs_probcl_knn(ood_set: str, label: str) -> Comparison:
    """TaU's temperature against probcl's own, stronger baseline: kNN on backbone features (k 10)."""
    return Comparison(
        f"TaU temperature - probcl's backbone kNN (k 10; probcl's own baseline, not the paper's), AUROC {label}",
        difference(ood_auroc("tau-simclr", ood_set, "uncertainty:neg_u"), ood_auroc("simclr", ood_set, "knn10")),
        unit="AUROC",
        margin=0.02,
        shown=(
            ("tau-simclr", f"ood/sets.{ood_set}.uncertainty:neg_u.auroc"),
            ("simclr", f"ood/sets.{ood_set}.knn10.auroc"),
        ),
        evidence="beyond",
    )


CLAIMS.register("tau-ood")(
    Claim(
        "TaU",
        "OOD detection from the temperature alone is competitive with kNN, MC-dropout and deep ensembles "
        "(no worse than the best of them by more than 0.02 AUROC).",
        "CIFAR-10 in-distribution (Table 1), AUROC vs CIFAR-100 / SVHN: TaU 0.746 / 0.964, SimCLR+kNN 0.746 / 0.829, "
        "MC-dropout 0.504 / 0.684, ensemble of 5 0.532 / 0.525",
        (
            _tau_competitive(NEAR_OOD, "near OOD (held-out classes)"),
            _tau_competitive("digits", "digits"),
            _tau_competitive("noise:gaussian", "Gaussian noise", "beyond"),
            _tau_competitive("inverted", "inverted images", "beyond"),
            _tau_vs_probcl_knn(NEAR_OOD, "near OOD (held-out classes)"),
            _tau_vs_probcl_knn("digits", "digits"),
        ),
        notes="Decided on natural-image dataset shifts (held-out classes, digits), the paper's kind of OOD set, "
        "against the paper's comparators; generated stress sets and probcl's backbone kNN are reported beside it.",
    )
)

CLAIMS.register("tau-accuracy")(
    Claim(
        "TaU",
        "Linear accuracy within about 3 points of the base method.",
        "The paper reports TaU's linear accuracy 1-3 points below SimCLR's",
        (
            Comparison(
                "TaU-SimCLR - SimCLR, linear top-1 (no worse than -3)",
                difference(metric("tau-simclr", "linear/top1"), metric("simclr", "linear/top1")),
                margin=3.0,
                shown=(("tau-simclr", "linear/top1"), ("simclr", "linear/top1")),
            ),
        ),
    )
)


def _posthoc_works(ood_set: str, label: str, evidence: str = "paper") -> Comparison:
    return Comparison(
        f"post-hoc TaU temperature AUROC - 0.5, {label}",
        difference(ood_auroc("tau-posthoc", ood_set, "uncertainty:neg_u"), constant(0.5)),
        unit="AUROC",
        paper_effect=0.25,
        shown=(("tau-posthoc", f"ood/sets.{ood_set}.uncertainty:neg_u.auroc"),),
        evidence=evidence,
    )


CLAIMS.register("tau-posthoc")(
    Claim(
        "TaU",
        "Post-hoc TaU on a frozen pretrained encoder detects OOD inputs (AUROC above chance).",
        "ImageNet encoders (Table 3): TaU + SimCLR AUROC 0.55-0.97 over seven OOD sets",
        (
            _posthoc_works(NEAR_OOD, "near OOD"),
            _posthoc_works("digits", "digits"),
            _posthoc_works("noise:gaussian", "Gaussian noise", "beyond"),
        ),
        notes="Decided on natural-image dataset shifts (held-out classes, digits); Gaussian noise is reported beside "
        "it as a stress set beyond the paper.",
    )
)

CLAIMS.register("ceb-accuracy")(
    Claim(
        "CEB",
        "C-SimCLR and C-BYOL above SimCLR and BYOL in linear accuracy.",
        "ImageNet, ResNet-50, like for like (Table 1): C-SimCLR +1.0 over the authors' SimCLR (300 epochs), +0.9 "
        "(1000 epochs); C-BYOL +0.8 / +1.4. (Table 3's 69.3 -> 71.6 compares with the original SimCLR paper's "
        "number, other augmentations: not the method's effect.)",
        (
            higher("c-simclr", "simclr", "linear/top1", "C-SimCLR - SimCLR, linear top-1", 1.0),
            higher("c-byol", "byol", "linear/top1", "C-BYOL - BYOL, linear top-1", 1.3),
        ),
    )
)

CLAIMS.register("ceb-corruptions")(
    Claim(
        "CEB",
        "C-SimCLR and C-BYOL more accurate than SimCLR and BYOL under corruptions.",
        "ImageNet-C and other domain shifts (Table 4): C-SimCLR / C-BYOL above SimCLR / BYOL on every shift",
        (
            higher("c-simclr", "simclr", "corruptions/mean_top1", "C-SimCLR - SimCLR, mean corruption top-1"),
            higher("c-byol", "byol", "corruptions/mean_top1", "C-BYOL - BYOL, mean corruption top-1"),
        ),
    )
)

CLAIMS.register("ceb-lipschitz")(
    Claim(
        "CEB",
        "Lower local Lipschitz constants than SimCLR and BYOL (smoother encoders).",
        "Appendix G: compression lowers the Lipschitz estimate (Eq. 19); figures, no table",
        (
            Comparison(
                "SimCLR - C-SimCLR, mean local Lipschitz estimate (kappa 1024)",
                difference(mean_of("simclr", LIPSCHITZ_KEYS), mean_of("c-simclr", LIPSCHITZ_KEYS)),
                unit="L",
                shown=tuple((group, key) for group in ("c-simclr", "simclr") for key in LIPSCHITZ_KEYS),
            ),
            Comparison(
                "BYOL - C-BYOL, mean local Lipschitz estimate (kappa 1024)",
                difference(mean_of("byol", LIPSCHITZ_KEYS), mean_of("c-byol", LIPSCHITZ_KEYS)),
                unit="L",
                shown=tuple((group, key) for group in ("c-byol", "byol") for key in LIPSCHITZ_KEYS),
            ),
        ),
        notes="Measured at one kappa (1024) for every method, so that runs are compared on one yardstick.",
    )
)
