"""A study's controls: extra cells that each change one setting of a method, read against the cells they vary.

A claim's verdict says *whether* a paper's effect shows at our budget; a control says *why not*: EBCLR
without its generative term, SimCLR on EBCLR's views, TaU at the authors' learning rate. For each compared
method and metric we give the mean difference (control minus compared) over the seeds both have, and:

- with two or more paired seeds, the two-sided 95 % Student-t interval of the paired differences (as the
  claims do): the difference is *above 0*, *below 0*, or the interval *includes 0*;
- with one seed, the seed-noise band ``2 * sqrt(2) * s`` of a difference between two independent runs,
  ``s`` the compared method's seed-to-seed standard deviation (its main-grid cells): *beyond seed noise*
  or *within seed noise*. With ``s`` from three seeds the band is rough: a reading, not a verdict.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from probcl.config import ConfigError
from probcl.report.claim_stats import metrics_by_seed, t_interval
from probcl.report.document import Document

DEFAULT_METRICS = ("linear/top1", "knn/top1")


@dataclass
class Control:
    """One control in a benchmark config: which methods it varies and the question it answers."""

    against: list[str]  # method labels it is compared with (the cell it varies first)
    asks: str  # the question, in one sentence
    # "suite/metric" keys, or {title: key} to name them in the table (else the headline's title, else the key)
    metrics: list[str] | dict[str, str] = field(default_factory=lambda: list(DEFAULT_METRICS))


def check_controls(controls: dict[str, Control], methods: dict, where: str) -> None:
    """Raise ConfigError unless every control and every method it is compared with is a benchmark method."""
    for label, control in controls.items():
        if label not in methods:
            raise ConfigError(f"{where}: controls.{label} is not one of the methods ({', '.join(methods)})")
        unknown = [m for m in control.against if m not in methods or m == label]
        if unknown or not control.against:
            raise ConfigError(
                f"{where}: controls.{label}.against must name other methods of this benchmark; "
                f"got {control.against or '[]'}"
            )


@dataclass(frozen=True)
class ControlReading:
    """One control vs one compared method on one metric."""

    control: str
    against: str
    key: str
    seeds: list[int]
    difference: float | None  # mean over ``seeds`` of control - against
    interval: tuple[float, float] | None  # 95 % t-interval of the paired differences (two or more seeds)
    band: float | None  # one seed: half-width of the seed-noise band (None: no spread to scale it by)

    @property
    def reading(self) -> str:
        if self.difference is None:
            return "missing"
        if self.interval is not None:
            low, high = self.interval
            return "above 0" if low > 0 else "below 0" if high < 0 else "includes 0"
        if self.band is None:
            return "no noise scale (the compared method has one seed, or its seeds agree exactly)"
        return "beyond seed noise" if abs(self.difference) > self.band else "within seed noise"

    @property
    def spread(self) -> str:
        """The interval or the noise band, as the report prints it."""
        if self.interval is not None:
            return f"[{self.interval[0]:+.3g}, {self.interval[1]:+.3g}]"
        return "—" if self.band is None else f"±{self.band:.3g}"


def _keys(metrics: list[str] | dict[str, str] | None) -> list[str]:
    return list(metrics.values()) if isinstance(metrics, dict) else list(metrics or DEFAULT_METRICS)


def read_controls(results: dict) -> list[ControlReading]:
    """Every configured control's readings, from a benchmark's results.json content."""
    controls = results["config"].get("controls") or {}
    by_seed = metrics_by_seed(results)
    readings = []
    for label, spec in controls.items():
        for against in spec["against"]:
            std_of = results["groups"].get(against, {}).get("metrics", {})
            for key in _keys(spec.get("metrics")):
                pairs = {
                    seed: m[label][key] - m[against][key]
                    for seed, m in by_seed.items()
                    if key in m.get(label, {}) and key in m.get(against, {})
                }
                std = (std_of.get(key) or {}).get("std")
                band = 2 * math.sqrt(2) * std if len(pairs) == 1 and std else None  # std 0: seeds agree exactly
                difference = statistics.fmean(pairs.values()) if pairs else None
                interval = t_interval([pairs[seed] for seed in sorted(pairs)])
                readings.append(ControlReading(label, against, key, sorted(pairs), difference, interval, band))
    return readings


def controls_table(doc: Document, results: dict, names: dict[str, str]) -> None:
    """A table of every control's readings; ``names`` maps metric keys to titles (the headline's), which a
    control's own ``{title: key}`` metrics override."""
    controls = results["config"].get("controls") or {}
    rows, previous = [], None
    for r in read_controls(results):
        first = r.control != previous
        previous = r.control
        metrics = controls[r.control].get("metrics")
        own = {key: title for title, key in metrics.items()} if isinstance(metrics, dict) else {}
        difference = "—" if r.difference is None else f"{r.difference:+.3g}"
        seeds = ", ".join(map(str, r.seeds)) or "—"
        rows.append(
            [
                f"`{r.control}`" if first else "",
                controls[r.control]["asks"] if first else "",
                r.against,
                own.get(r.key) or names.get(r.key, r.key),
                seeds,
                difference,
                r.spread,
                r.reading,
            ]
        )
    doc.table(
        ["control", "asks", "compared with", "metric", "seeds", "difference", "95 % interval / noise band", "reading"],
        rows,
    )
