"""Claims as data: a benchmark config's ``claims:`` section, parsed into :mod:`~probcl.report.claim_stats` claims.

Each claim is a mapping (the study's are in ``probcl/presets/fashion-mnist/study.yaml``)::

    ebclr-accuracy:
      paper: EBCLR
      statement: Higher linear and kNN accuracy than SimCLR ...
      paper_numbers: FMNIST linear top-1, ResNet-18, 100 epochs (Table 1) ...
      notes: ...                    # optional
      comparisons:
        - label: EBCLR - SimCLR, linear top-1
          value: {minus: [{metric: [ebclr, linear/top1]}, {metric: [simclr, linear/top1]}]}
          paper_effect: 1.6         # optional: the paper's difference in the same orientation
          unit: points              # optional (points)
          margin: 0                 # optional: > 0 makes it a "no worse than" comparison
          evidence: paper           # optional: paper (decides the verdict) or beyond (a stress set)
          shown: [[ebclr, linear/top1], [simclr, linear/top1]]  # optional: default, every metric the value reads

A comparison's ``value`` (positive supports the claim) is an expression over one seed's metrics; when it is a
``minus``, its two terms are the comparison's arms (the unpaired analysis compares them), otherwise the arms are the
value and 0. Expressions:
a number; ``{metric: [group, key]}`` (with ``default: x`` for a missing key and ``requires: key2``, None unless
the group has key2); ``{mean: [group, [key, ...]]}``; ``{minus: [a, b]}``; ``{best: [a, b, ...]}``.
"""

from __future__ import annotations

from typing import Any

from probcl.errors import ConfigError
from probcl.report.claim_stats import (
    BEYOND,
    PAPER,
    Claim,
    ClaimResult,
    Code,
    Comparison,
    Value,
    best_of,
    constant,
    difference,
    judge_claims,
    mean_of,
    metric,
    metric_or,
)

EXPRESSIONS = ("metric", "mean", "minus", "best")
CLAIM_KEYS = {"paper", "statement", "paper_numbers", "comparisons", "notes"}
COMPARISON_KEYS = {"label", "value", "unit", "margin", "paper_effect", "evidence", "shown"}


def parse_value(expr: Any, where: str, reads: list[tuple[str, str]], codes: list[Code]) -> Value:
    """The value function of one expression; appends the (group, metric) pairs it reads to ``reads`` and the codes
    it may stand for (a metric's ``default``) to ``codes``."""
    if isinstance(expr, (int, float)) and not isinstance(expr, bool):
        return constant(float(expr))
    if not isinstance(expr, dict) or len(set(expr) & set(EXPRESSIONS)) != 1:
        raise ConfigError(f"{where}: {expr!r} is not a value; use a number or one of {', '.join(EXPRESSIONS)}")
    (kind,) = set(expr) & set(EXPRESSIONS)
    args = expr[kind]
    if kind == "metric":
        if not (isinstance(args, list) and len(args) == 2 and all(isinstance(a, str) for a in args)):
            raise ConfigError(f"{where}: metric takes [group, key], got {args!r}")
        reads.append((args[0], args[1]))
        if "default" in expr or "requires" in expr:
            value, code = metric_or(
                args[0], args[1], float(expr.get("default", 0.0)), str(expr.get("requires", args[1]))
            )
            codes.append(code)
            return value
        return metric(args[0], args[1])
    if kind == "mean":
        if not (isinstance(args, list) and len(args) == 2 and isinstance(args[1], list)):
            raise ConfigError(f"{where}: mean takes [group, [key, ...]], got {args!r}")
        reads.extend((args[0], key) for key in args[1])
        return mean_of(args[0], tuple(args[1]))
    if not isinstance(args, list) or (kind == "minus" and len(args) != 2) or not args:
        raise ConfigError(
            f"{where}: {kind} takes a list of {'2 values' if kind == 'minus' else 'values'}, got {args!r}"
        )
    parts = [parse_value(a, f"{where}.{kind}[{i}]", reads, codes) for i, a in enumerate(args)]
    return difference(parts[0], parts[1]) if kind == "minus" else best_of(*parts)


def parse_comparison(data: Any, where: str) -> Comparison:
    """One comparison of a claim (see the module docstring)."""
    if not isinstance(data, dict) or not {"label", "value"} <= set(data) or set(data) - COMPARISON_KEYS:
        raise ConfigError(
            f"{where}: a comparison is a mapping with label and value (optional: "
            f"{', '.join(sorted(COMPARISON_KEYS - {'label', 'value'}))}), got {data!r}"
        )
    evidence = data.get("evidence", PAPER)
    if evidence not in (PAPER, BEYOND):
        raise ConfigError(f"{where}.evidence must be {PAPER} or {BEYOND}, got {evidence!r}")
    reads: list[tuple[str, str]] = []
    codes: list[Code] = []
    expr = data["value"]
    arms = expr.get("minus") if isinstance(expr, dict) and set(expr) == {"minus"} else None
    if isinstance(arms, list) and len(arms) == 2:  # the two arms, for the unpaired analysis
        ours, theirs = (parse_value(a, f"{where}.value.minus[{i}]", reads, codes) for i, a in enumerate(arms))
    else:
        ours, theirs = parse_value(expr, f"{where}.value", reads, codes), constant(0.0)
    shown = data.get("shown")
    sampling = _sampling_spread(arms) if isinstance(arms, list) and len(arms) == 2 else None
    return Comparison(
        str(data["label"]),
        ours,
        theirs,
        unit=str(data.get("unit", "points")),
        margin=float(data.get("margin", 0.0)),
        paper_effect=None if data.get("paper_effect") is None else float(data["paper_effect"]),
        shown=tuple(dict.fromkeys(reads)) if shown is None else tuple((str(g), str(k)) for g, k in shown),
        evidence=evidence,
        codes=tuple(codes),
        sampling=sampling,
    )


BOOTSTRAP_SUFFIX = "_bootstrap.std"  # a metric's spread over bootstrap resamples of the test images, beside it
BOOTSTRAPPED = ("ece",)  # the metrics whose suites record that spread (the calibration suite's ECE)


def _sampling_spread(arms: list[Any]) -> tuple[Value, Value] | None:
    """Each arm's test-image bootstrap spread, when both arms are plain metrics that record one (``KEY`` with
    ``KEY_bootstrap.std`` beside it: the ECE): the statistics add it to both analyses (claim_stats docstring)."""
    spreads = []
    for arm in arms:
        args = arm.get("metric") if isinstance(arm, dict) and set(arm) == {"metric"} else None
        if not (isinstance(args, list) and len(args) == 2 and str(args[1]).endswith(BOOTSTRAPPED)):
            return None
        spreads.append(metric(str(args[0]), f"{args[1]}{BOOTSTRAP_SUFFIX}"))
    return spreads[0], spreads[1]


def parse_claims(data: Any, where: str = "claims") -> dict[str, Claim]:
    """``{name: Claim}`` from a config's ``claims:`` mapping; one ConfigError naming the bad entry otherwise."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"{where} must be a mapping of claim name -> claim (paper, statement, paper_numbers, "
            f"comparisons), got {type(data).__name__}"
        )
    claims = {}
    for name, claim in data.items():
        at = f"{where}.{name}"
        if not isinstance(claim, dict) or not CLAIM_KEYS - {"notes"} <= set(claim) or set(claim) - CLAIM_KEYS:
            raise ConfigError(f"{at}: a claim has {', '.join(sorted(CLAIM_KEYS - {'notes'}))} (and optional notes)")
        if not isinstance(claim["comparisons"], list) or not claim["comparisons"]:
            raise ConfigError(f"{at}.comparisons must be a non-empty list")
        comparisons = tuple(parse_comparison(c, f"{at}.comparisons[{i}]") for i, c in enumerate(claim["comparisons"]))
        claims[str(name)] = Claim(
            str(claim["paper"]),
            str(claim["statement"]),
            str(claim["paper_numbers"]),
            comparisons,
            str(claim.get("notes", "")),
        )
    return claims


def evaluate_claims(results: dict, names: list[str] | None = None) -> list[ClaimResult]:
    """The verdicts of the claims a benchmark's results.json carries in its config (only ``names``, when given)."""
    claims = parse_claims(results["config"].get("claims") or {})
    unknown = [n for n in names or () if n not in claims]
    if unknown:
        raise ConfigError(f"no claim {', '.join(unknown)} in these results; they have: {', '.join(claims)}")
    return judge_claims(results, claims if names is None else {n: claims[n] for n in names})
