"""Evaluation suites registered by name with their options, and the ``linear`` and ``knn`` suites.

A suite is a function ``(ctx: ModelOnData, options) -> dict`` registered with an options
dataclass (``@SUITES.register("knn", options=KnnOptions, title="kNN")``). Options arrive as
plain data (``--option knn.knn_k=20``, a benchmark's ``suite_options``) and are checked with the
config loader: unknown keys and bad values stop before any work with one line naming
``suite.key``. A suite that needs more than embeddings of a model (a probcl run's training curves,
projection head, augmentations) says why in ``needs_run``; foreign encoders are refused it. A result
records its protocol next to the numbers, and figure data (histograms, bins, curves) that only
``probcl.report`` draws.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

from probcl.config import AtLeast, OneOf, Positive, from_dict
from probcl.core.deprecation import renamed_keys
from probcl.core.registry import Registry
from probcl.errors import ConfigError
from probcl.eval.context import LINEAR_PROBES, ModelOnData
from probcl.eval.knn import knn_classify, neighbours_within, topk_accuracy
from probcl.eval.linear import LinearProbe
from probcl.eval.linear_sgd import SGDProbeOptions

SuiteFn = Callable[[ModelOnData, Any], dict]
Summary = Callable[[dict], dict[str, float]]  # a result -> the few numbers printed on the console
# retired option names (glossary: the kNN neighbour count is knn_k everywhere), accepted for one release
RENAMED_OPTIONS = {"knn": {"k": "knn_k"}}


@dataclass
class NoOptions:
    """A suite without options."""


@dataclass(frozen=True)
class Suite:
    """A registered suite: its function, options dataclass, report title, why it needs a probcl run
    (None: embeddings suffice, so it also evaluates foreign encoders), and its console summary (None: every
    number of the result is printed; eval.json and the report always hold them all)."""

    name: str
    run: SuiteFn
    options: type
    title: str
    needs_run: str | None = None
    summary: Summary | None = None

    def parse_options(self, raw: dict[str, Any] | None = None) -> Any:
        """The validated options object; ConfigError naming ``suite.key`` and the valid keys otherwise."""
        raw = renamed_keys(raw or {}, RENAMED_OPTIONS.get(self.name, {}), self.name)
        valid = [f.name for f in dataclasses.fields(self.options)]
        unknown = sorted(set(raw) - set(valid))
        if unknown:
            keys = ", ".join(f"{self.name}.{k}" for k in unknown)
            choices = f"valid options: {', '.join(valid)}" if valid else f"suite {self.name} takes no options"
            raise ConfigError(f"unknown suite option {keys}; {choices}")
        return from_dict(self.options, raw, self.name)

    def __call__(self, ctx: ModelOnData, options: dict[str, Any] | None = None) -> dict:
        return self.run(ctx, self.parse_options(options))


class SuiteRegistry:
    """Suites by name (see the module docstring)."""

    def __init__(self) -> None:
        self._suites: Registry[Suite] = Registry("evaluation suite")

    def register(
        self,
        name: str,
        options: type = NoOptions,
        title: str | None = None,
        needs_run: str | None = None,
        summary: Summary | None = None,
    ) -> Callable[[SuiteFn], SuiteFn]:
        def decorator(fn: SuiteFn) -> SuiteFn:
            self._suites.register(name)(Suite(name, fn, options, title or name, needs_run, summary))
            return fn

        return decorator

    def get(self, name: str) -> Suite:
        return self._suites.get(name)

    def names(self) -> list[str]:
        return self._suites.names()

    def __contains__(self, name: str) -> bool:
        return name in self._suites

    def __iter__(self) -> Iterator[str]:
        return iter(self._suites)

    def parse_all(self, suites: list[str], options: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
        """Validated options of each suite in ``suites``; options for a suite not in ``suites`` are an error."""
        options = options or {}
        stray = [name for name in options if name not in suites]
        if stray:
            raise ConfigError(
                f"options given for suite(s) {', '.join(stray)} that are not being run "
                f"({', '.join(suites)}); add them to --suite or drop those options"
            )
        return {name: self.get(name).parse_options(options.get(name)) for name in suites}


SUITES = SuiteRegistry()


@dataclass
class ProbeOptions:
    """Which offline linear probes a suite reports: the first one's numbers are the result's own, every other
    one's sit under its name (``sgd.top1``, ``sgd.ece``); ``sgd`` holds the SGD probe's settings."""

    probes: list[Annotated[str, OneOf(LINEAR_PROBES)]] = field(
        default_factory=lambda: ["lbfgs"]
    )  # first: the result's own
    sgd: SGDProbeOptions = field(default_factory=SGDProbeOptions)

    def __post_init__(self) -> None:
        if not self.probes or len(set(self.probes)) != len(self.probes):
            raise ConfigError(f"probes must name each probe once ({', '.join(LINEAR_PROBES)}), got {self.probes}")


def per_probe(ctx: ModelOnData, options: ProbeOptions, measure: Callable[[LinearProbe], dict]) -> dict:
    """``measure(probe)`` of the first probe of ``options``, with the others' results under their names."""
    result = measure(ctx.linear_probe(options.probes[0], options.sgd)[1])
    for name in options.probes[1:]:
        result[name] = measure(ctx.linear_probe(name, options.sgd)[1])
    return result


@SUITES.register("linear", options=ProbeOptions, title="Linear probe")
def linear_suite(ctx: ModelOnData, options: ProbeOptions) -> dict:
    """Offline linear probe(s): top-1/top-5 test accuracy (%) and each probe's protocol."""
    results = {name: ctx.linear_probe(name, options.sgd)[0] for name in options.probes}
    result = dict(results[options.probes[0]])
    result["protocol"] = {**result["protocol"], **ctx.protocol()}
    result.update({name: results[name] for name in options.probes[1:]})
    return result


@dataclass
class KnnOptions:
    knn_k: Annotated[int, AtLeast(1)] = 200  # neighbours of the weighted kNN
    temperature: Annotated[float, Positive] = 0.1  # T of the exp(sim / T) votes
    plain_k: Annotated[int, AtLeast(1)] = 20  # neighbours of the plain (Euclidean, majority) kNN


@SUITES.register("knn", options=KnnOptions, title="kNN")
def knn_suite(ctx: ModelOnData, options: KnnOptions) -> dict:
    """Weighted kNN (cosine, exp(sim/T) votes) and plain kNN (Euclidean majority), test accuracy (%)."""
    temperature = options.temperature
    train_f, train_y = ctx.features("train")
    k = neighbours_within(options.knn_k, len(train_f), "knn.knn_k", ctx.note)
    plain_k = neighbours_within(options.plain_k, len(train_f), "knn.plain_k", ctx.note)
    test_f, test_y = ctx.features("test")
    scores, predictions = knn_classify(train_f, train_y, test_f, ctx.num_classes, k, temperature, plain_k)
    assert scores is not None and predictions is not None
    weighted = topk_accuracy(scores, test_y)
    plain = 100.0 * (predictions == test_y).float().mean().item()
    return {
        "top1": weighted["top1"],
        "top5": weighted.get("top5"),
        "plain_top1": plain,
        "protocol": ctx.protocol(
            weighted=f"k={k}, T={temperature}, cosine, exp(sim/T) votes (InstDisc)",
            plain=f"k={plain_k}, Euclidean, majority vote",
            best_epoch_picked=False,
        ),
    }
