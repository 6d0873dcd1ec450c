"""Equal-budget tuning on held-out training images (docs/study-v3-protocol.md).

A tuning file (``fashion-mnist/study-v3-tuning``) names a study budget, each method's most sensitive settings
(a range and a why each), the number of trials every method gets, the seeded draw and the selection rule. It is
committed before any trial runs. From it:

- :func:`trials_tree` is the benchmark config whose cells are the trials (``data_protocol: heldout``, the
  ``heldout`` suite only), written beside the tuning file and run by ``probcl benchmark`` (resumable, several
  workers, each finished trial published as it lands). Trials are listed trial 0 of every method, then trial 1
  of every method, ...: stopped at any point, every method has had the same number of trials (+-1);
- :func:`select` applies the rule to the published trials; :func:`selection_markdown` is the report table;
  a file that compares new candidates against a seed method (``candidates``) also has its candidate rule, which
  :mod:`probcl.tasks.candidates` applies;
- :func:`tuned_tree` is the study config with every method's winning settings (``extends`` the budget), which the
  v3 study extends: the settings go from the results to the study by this code, never by hand.

:func:`check_heldout_protocol` is what ``data_protocol: heldout`` enforces before any work: only the ``heldout``
suite (training split only), no online monitor (it reads the test split), every cell's data a class filter without
the ``never_load_classes``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from probcl.config import AtLeast, ConfigError, NonNegative, OneOf, from_dict
from probcl.core.io import read_json
from probcl.data.specs import CLASS_FILTER, is_path_spec, parse_classes
from probcl.tasks.benchmark.extends import preset_path, read_tree

if TYPE_CHECKING:
    from probcl.tasks.benchmark.grid import BenchmarkConfig

HELDOUT_SUITES = ("heldout",)  # the suites that read the training split only
SCALES = ("log", "linear", "log-complement")  # log-complement: log-uniform in 1 - x (EMA momenta near 1)
TRIAL_SEPARATOR = "-t"  # a trial's method label: <method>-t<k>
CONTROL_SUFFIX = "-preset"  # a preset control's label: <method>-preset
CONTROL_INDEX = -1  # a preset control's trial number
SIGNIFICANT_DIGITS = 3  # a drawn value is rounded to these, so that the configs read as written


@dataclass
class Parameter:
    """One setting's range and why it is among the method's most sensitive."""

    low: float
    high: float
    why: str
    scale: Annotated[str, OneOf(SCALES)] = "log"

    def value(self, u: float) -> float:
        """The setting at quantile ``u`` in [0, 1) of its range, on its scale, rounded."""
        if self.scale == "linear":
            x = self.low + u * (self.high - self.low)
        elif self.scale == "log":
            x = math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low)))
        else:  # log-uniform in 1 - x, from 1 - low down to 1 - high
            x = 1.0 - math.exp(math.log(1.0 - self.low) + u * (math.log(1.0 - self.high) - math.log(1.0 - self.low)))
        return float(f"{x:.{SIGNIFICANT_DIGITS}g}")


@dataclass
class TunedMethod:
    """A tuned method: its settings' ranges; a method of the budget's grid, or a candidate of its own (``config``)."""

    space: dict[str, Parameter]
    # a method entry of its own, for a candidate the budget lacks: its preset, and fixed overrides on top of the
    # budget's (e.g. the SimCLR preset with a low encoder dropout under its own label); unset: the budget's entry
    config: str | None = None
    overrides: dict = field(default_factory=dict)  # fixed settings of the candidate's entry (needs config)


@dataclass
class Inherited:
    """A budget cell that takes another method's winning settings untuned (e.g. a control of that method)."""

    source: str  # the tuned method whose winner it takes
    why: str


@dataclass
class Draw:
    """How each method's trials are drawn: a Latin hypercube (each setting's range cut into ``trials`` equal
    quantile strata, one trial per stratum, strata paired across settings at random), seeded."""

    design: Annotated[str, OneOf(("latin-hypercube",))] = "latin-hypercube"
    seed: int = 0


@dataclass
class Selection:
    """The rule that picks each method's winner (written before any trial runs)."""

    metric: str  # "suite/metric" of eval.json, higher is better; mean over the trial's seeds
    ties: list[str] = field(default_factory=list)  # then these, in order; then the lowest trial number
    rule: str = ""  # the rule in words, for the report


@dataclass
class PresetControls:
    """One more run per tuned method, at its preset's own settings (the budget's entry, nothing drawn), under the
    same protocol and seeds as the trials, and the rule (written before any control runs) by which a winner
    replaces its preset's defaults: when its selection metric beats the control's by more than ``margin``."""

    margin: Annotated[float, NonNegative]  # points of the selection metric: a smaller gain is within run-to-run noise
    rule: str  # the rule in words, for the report


@dataclass
class CandidateRule:
    """How new candidates are chosen against a seed method (written before any candidate trial runs; applied by
    :func:`probcl.tasks.candidates.choose`): within each candidate, the trial with the highest ``metric`` among
    those within ``accuracy_margin`` of the seed method's winner's ``accuracy`` and ``calibration_margin`` of its
    ``calibration``; the winner, the qualifying candidate with the highest ``metric``."""

    seed: str  # the tuned method the candidates must match: its winner under `selection` sets the bar
    candidates: list[str]  # tuned methods (labels of `methods`), in the order ties fall back to
    rule: str  # the rule in words, for the report
    metric: str = "heldout/near_ood_knn10_auroc"  # what a candidate must raise (higher is better)
    accuracy: str = "heldout/linear_top1"  # higher is better; the bar: the seed winner's minus accuracy_margin
    calibration: str = "heldout/linear_ece"  # lower is better; the bar: the seed winner's plus calibration_margin
    accuracy_margin: Annotated[float, NonNegative] = 0.3  # points of `accuracy` a candidate may lose
    calibration_margin: Annotated[float, NonNegative] = 0.005  # `calibration` a candidate may add
    tie: Annotated[float, NonNegative] = 0.002  # winners' `metric` this close tie, broken by the higher accuracy

    @property
    def readings(self) -> list[str]:
        return [self.metric, self.accuracy, self.calibration]


@dataclass
class TuningSpec:
    """A tuning file (see the module docstring)."""

    title: str  # the trials' report title
    budget: str  # the study whose `overrides` and method entries every trial takes (e.g. fashion-mnist/study)
    trials_file: str  # the generated benchmark config of the trials, beside this file
    out: str  # the trials' benchmark folder (runs, checkpoints)
    publish: str  # where each finished trial's small files are published (docs/results/...)
    trials: Annotated[int, AtLeast(1)]  # trials per tuned method, the same for every one
    selection: Selection  # the rule that picks each method's winner
    methods: dict[str, TunedMethod]  # label (a method of the budget) -> its settings' ranges
    never_load_classes: list[int] = field(default_factory=list)  # classes no trial may load (data_protocol heldout)
    seeds: list[int] = field(default_factory=lambda: [0])  # seeds of every trial
    draw: Draw = field(default_factory=Draw)  # how the trials are drawn
    heldout: dict = field(default_factory=dict)  # the heldout suite's options
    overrides: dict = field(default_factory=dict)  # on top of the budget's (e.g. another class split)
    inherit: dict[str, Inherited] = field(default_factory=dict)  # budget cells that take a tuned method's winner
    untuned: dict[str, str] = field(default_factory=dict)  # budget cells left as they are -> why
    tuned_file: str | None = None  # the generated study config with the winners (beside this file)
    description: str = ""  # printed at the top of the trials' report
    candidates: CandidateRule | None = None  # new methods chosen against a seed method (probcl.tasks.candidates)
    preset_controls: PresetControls | None = None  # each tuned method's preset run too: where does its winner win?


def load_tuning(path: str | Path) -> tuple[TuningSpec, Path]:
    """The tuning file and its folder; every budget method named and its parameters valid, or one ConfigError."""
    from probcl.core.presets import resolve_config_path

    resolved = resolve_config_path(str(path))
    assert resolved is not None
    spec = from_dict(TuningSpec, read_tree(Path(resolved), "tuning file"), "tuning")
    budget_methods = _budget(spec, Path(resolved).parent).methods
    for label in [*spec.methods, *spec.inherit, *spec.untuned]:
        own = label in spec.methods and spec.methods[label].config is not None
        if own and label in budget_methods:
            raise ConfigError(
                f"{resolved}: methods.{label} has a config of its own but {label!r} is a method of the budget "
                f"{spec.budget}: drop its config (the budget's entry) or give it another label"
            )
        if not own and label not in budget_methods:
            raise ConfigError(
                f"{resolved}: {label!r} is not a method of the budget {spec.budget}; a new candidate names its "
                "preset (methods.LABEL.config)"
            )
    for label, method in spec.methods.items():
        if method.overrides and method.config is None:
            raise ConfigError(f"{resolved}: methods.{label}.overrides needs methods.{label}.config (its preset)")
        if drawn_and_fixed := sorted(set(method.overrides) & set(method.space)):
            raise ConfigError(
                f"{resolved}: methods.{label} fixes {', '.join(drawn_and_fixed)} in overrides and draws it in space: "
                "keep one"
            )
    if spec.candidates is not None:
        _check_candidates(spec.candidates, spec, str(resolved))
    for label, inherited in spec.inherit.items():
        if inherited.source not in spec.methods:
            raise ConfigError(f"{resolved}: inherit.{label}.source {inherited.source!r} is not a tuned method")
    for label, method in spec.methods.items():
        if not method.space:
            raise ConfigError(f"{resolved}: methods.{label}.space is empty")
        for key, p in method.space.items():
            bounded = p.scale != "log-complement" or p.high < 1.0
            if not (p.low < p.high and (p.scale == "linear" or p.low > 0) and bounded and p.why.strip()):
                raise ConfigError(
                    f"{resolved}: methods.{label}.space.{key} needs low < high (> 0 on a log scale, < 1 on "
                    "log-complement) and a why"
                )
    return spec, Path(resolved).parent


def _check_candidates(rule: CandidateRule, spec: TuningSpec, where: str) -> None:
    """One ConfigError unless the seed and every candidate are distinct tuned methods and the rule is written."""
    named = [rule.seed, *rule.candidates]
    if not rule.candidates or len(set(named)) != len(named):
        raise ConfigError(f"{where}: candidates.candidates must list one or more labels, none twice nor the seed")
    for label in named:
        if label not in spec.methods:
            raise ConfigError(f"{where}: candidates names {label!r}, which is not a tuned method (methods.{label})")
    if not rule.rule.strip():
        raise ConfigError(f"{where}: candidates.rule must state the rule in words, before any trial runs")


def method_entry(spec: TuningSpec, budget: BenchmarkConfig, label: str) -> tuple[str, dict]:
    """A tuned method's (preset, fixed overrides): its own entry, else the budget's."""
    from probcl.tasks.benchmark.grid import method_spec

    method = spec.methods[label]
    return (method.config, dict(method.overrides)) if method.config is not None else method_spec(budget, label)


def _budget(spec: TuningSpec, base_dir: Path) -> BenchmarkConfig:
    from probcl.tasks.benchmark.grid import load_benchmark

    return load_benchmark(preset_path(spec.budget, base_dir))[0]


def latin_hypercube(n: int, dims: int, seed: str) -> list[list[float]]:
    """``n`` points in [0, 1)^dims: in every dimension, exactly one point in each of the ``n`` strata
    [i/n, (i+1)/n), uniform inside it; the strata are paired across dimensions by seeded permutations."""
    rng = random.Random(seed)
    columns = []
    for _ in range(dims):
        strata = list(range(n))
        rng.shuffle(strata)
        columns.append([(s + rng.random()) / n for s in strata])
    return [[column[i] for column in columns] for i in range(n)]


def draw_trials(spec: TuningSpec) -> dict[str, list[dict[str, float]]]:
    """Each tuned method's trial settings (trial k = the k-th point), seeded by the draw seed and the label."""
    drawn = {}
    for label, method in spec.methods.items():
        keys = list(method.space)
        points = latin_hypercube(spec.trials, len(keys), f"{spec.draw.seed}:{label}")
        drawn[label] = [{k: method.space[k].value(u) for k, u in zip(keys, point, strict=True)} for point in points]
    return drawn


def trial_label(method: str, k: int) -> str:
    return f"{method}{TRIAL_SEPARATOR}{k}"


def control_label(method: str) -> str:
    return f"{method}{CONTROL_SUFFIX}"


def trials_tree(spec: TuningSpec, base_dir: Path) -> dict:
    """The benchmark config whose cells are the trials (see the module docstring), then the preset controls."""
    budget = _budget(spec, base_dir)
    drawn = draw_trials(spec)
    methods = {}
    for k in range(spec.trials):
        for label in spec.methods:
            preset, overrides = method_entry(spec, budget, label)
            methods[trial_label(label, k)] = {"config": preset, "overrides": {**overrides, **drawn[label][k]}}
    for label in spec.methods if spec.preset_controls else []:
        preset, overrides = method_entry(spec, budget, label)
        methods[control_label(label)] = {"config": preset, "overrides": overrides}
    metric_titles = {spec.selection.metric: "selection metric", **{m: "tie-break" for m in spec.selection.ties}}
    for metric in spec.candidates.readings if spec.candidates else []:
        metric_titles.setdefault(metric, "candidate rule")
    return {
        "title": spec.title,
        "description": spec.description,
        "out": spec.out,
        "publish": spec.publish,
        "data_protocol": "heldout",
        "never_load_classes": list(spec.never_load_classes),
        "seeds": list(spec.seeds),
        "suites": list(HELDOUT_SUITES),
        "suite_options": {"heldout": dict(spec.heldout)} if spec.heldout else {},
        "eval": {"batch_size": budget.eval.batch_size},
        "headline": {f"{metric} ({why})": metric for metric, why in metric_titles.items()},
        "overrides": {**budget.overrides, **spec.overrides, "train.monitor_every_n_epochs": 0},
        "methods": methods,
    }


def check_heldout_protocol(bench: BenchmarkConfig, base_dir: Path, where: str) -> None:
    """Refuse (one ConfigError) a ``data_protocol: heldout`` benchmark that could load a test image or a class of
    ``never_load_classes``: a suite other than ``heldout``, an online monitor, a cell whose data is not a class
    filter without those classes, an init from another run, claims, references or ensembles."""
    from probcl.tasks.benchmark.grid import cell_config, grid

    if set(bench.suites) - set(HELDOUT_SUITES):
        raise ConfigError(
            f"{where}: data_protocol heldout runs only the {', '.join(HELDOUT_SUITES)} suite (the others read the "
            f"test split); remove {', '.join(s for s in bench.suites if s not in HELDOUT_SUITES)}"
        )
    if bench.reference or bench.ensemble or bench.seed_ensembles or bench.claims or bench.budgets:
        raise ConfigError(
            f"{where}: data_protocol heldout takes no reference, ensemble, seed_ensembles, claims or budgets"
        )
    never = set(bench.never_load_classes)
    near_ood = (bench.suite_options.get("heldout") or {}).get("near_ood")
    if near_ood is not None and (problem := _class_filter_problem(near_ood, never)):
        raise ConfigError(f"{where}: suite_options.heldout.near_ood: {problem}")
    for cell in grid(bench):
        cfg = cell_config(bench, cell, Path(bench.out), base_dir)
        if cfg.train.monitor_every_n_epochs != 0:
            problem = "its online monitor reads the test split: set train.monitor_every_n_epochs 0"
        elif cfg.init:
            problem = "it starts from another run (init), which this protocol cannot vouch for"
        else:
            problem = _class_filter_problem(cfg.data.dataset, never)
        if problem:
            raise ConfigError(f"{where}: cell {cell.name}: {problem}")


def _class_filter_problem(spec: str, never: set[int]) -> str | None:
    """Why the dataset ``spec`` may load a class of ``never`` (None when it cannot)."""
    if CLASS_FILTER not in spec or is_path_spec(spec):
        return f"its data {spec!r} is not a class filter (NAME:classes=...)"
    loaded = set(parse_classes(spec.partition(CLASS_FILTER)[2], spec)) & never
    return f"its data {spec!r} loads class(es) {sorted(loaded)} of never_load_classes" if loaded else None


# ----------------------------------------------------------------- selection
def _metric(evaluation: dict, path: str) -> float | None:
    suite, _, name = path.partition("/")
    value = (evaluation.get(suite) or {}).get(name)
    return None if value is None else float(value)


@dataclass
class Trial:
    """One trial's settings and, per seed, its selection metric and tie-breaks (None: not finished)."""

    method: str
    index: int
    settings: dict[str, float | None]  # a control's: None until it has run
    scores: dict[int, list[float] | None]  # seed -> [metric, *ties]; [-inf, ...] for a diverged run
    hardware: dict[int, str] = field(default_factory=dict)  # seed -> where it ran (GPU name, else "CPU")
    readings: dict[int, dict[str, float]] = field(default_factory=dict)  # seed -> every metric read (not diverged)

    @property
    def complete(self) -> bool:
        return all(v is not None for v in self.scores.values())

    @property
    def diverged(self) -> bool:
        """Whether a seed of the trial diverged (its scores -inf)."""
        return any(v is not None and v[0] == -math.inf for v in self.scores.values())

    def mean(self, metric: str) -> float:
        """``metric``'s mean over the trial's seeds (a finished trial that did not diverge)."""
        assert self.complete and not self.diverged, f"{self.method} trial {self.index} has no {metric} to average"
        values = [reading[metric] for reading in self.readings.values()]
        return sum(values) / len(values)

    @property
    def means(self) -> list[float]:
        rows = [v for v in self.scores.values() if v is not None]
        return [sum(col) / len(col) for col in zip(*rows, strict=True)] if rows else []


@dataclass
class MethodSelection:
    """A method's trials and, once every one has finished, its winner; and its preset control, where run."""

    method: str
    trials: list[Trial]
    control: Trial | None = None  # the method at its preset's own settings (index CONTROL_INDEX)

    @property
    def complete(self) -> bool:
        return all(t.complete for t in self.trials)

    @property
    def winner(self) -> Trial | None:
        """The rule: highest mean metric, then each tie-break's mean, then the lowest trial number."""
        if not self.complete:
            return None
        return max(self.trials, key=lambda t: (*t.means, -t.index))


def ran_on(record: dict) -> str:
    """Where a cell ran, from its cell.json's provenance: the GPU's name, else "CPU"."""
    return (record.get("provenance") or {}).get("gpu") or "CPU"


def select(spec: TuningSpec, published: Path) -> list[MethodSelection]:
    """Every tuned method's trials as published under ``published/cells`` (cell.json and eval.json), the winner
    of each method whose trials have all finished, and its preset control where the file runs them."""
    drawn = draw_trials(spec)
    metrics = [spec.selection.metric, *spec.selection.ties]
    rule = spec.candidates
    selections = []
    for label in spec.methods:
        # a method of the candidate rule has finished a seed once the rule's readings are there too
        judged = rule is not None and label in (rule.seed, *rule.candidates)
        read = list(dict.fromkeys([*metrics, *(rule.readings if rule is not None and judged else [])]))
        trials = [
            _read_trial(spec, published, label, k, trial_label(label, k), settings, metrics, read)
            for k, settings in enumerate(drawn[label])
        ]
        control = None
        if spec.preset_controls is not None:
            cells = [published / "cells" / f"{control_label(label)}-s{seed}" for seed in spec.seeds]
            settings = _preset_settings(cells, list(spec.methods[label].space))
            control = _read_trial(spec, published, label, CONTROL_INDEX, control_label(label), settings, metrics, read)
        selections.append(MethodSelection(label, trials, control))
    return selections


def _read_trial(
    spec: TuningSpec,
    published: Path,
    method: str,
    index: int,
    cell_label: str,
    settings: Mapping[str, float | None],
    metrics: list[str],
    read: list[str],
) -> Trial:
    """The trial ``cell_label``'s published seeds: their scores (None: unfinished; -inf: diverged), hardware and
    every reading of ``read``."""
    scores: dict[int, list[float] | None] = {}
    hardware: dict[int, str] = {}
    readings: dict[int, dict[str, float]] = {}
    for seed in spec.seeds:
        cell = published / "cells" / f"{cell_label}-s{seed}"
        record, evaluation = read_json(cell / "cell.json"), read_json(cell / "eval.json", {})
        if record is not None:
            hardware[seed] = ran_on(record)
        if record is not None and record.get("error") and not record.get("retry"):
            scores[seed] = [-math.inf] * len(metrics)  # diverged: the trial loses
            continue
        values = [_metric(evaluation, m) for m in read]
        if record is None or None in values:
            scores[seed] = None
            continue
        readings[seed] = {m: v for m, v in zip(read, values, strict=True) if v is not None}
        scores[seed] = [readings[seed][m] for m in metrics]
    return Trial(method, index, dict(settings), scores, hardware, readings)


def _preset_settings(cells: list[Path], keys: list[str]) -> dict[str, float | None]:
    """The tuned settings' values in a control's run config (its published ``config.yaml``; None before it ran)."""
    import yaml

    for cell in cells:
        if (cell / "config.yaml").is_file():
            tree = yaml.safe_load((cell / "config.yaml").read_text()) or {}
            return {key: float(_dotted(tree, key)) for key in keys}
    return dict.fromkeys(keys)


def _dotted(tree: dict, key: str) -> Any:
    for part in key.split("."):
        tree = tree[part]
    return tree


@dataclass(frozen=True)
class PresetVerdict:
    """Whether a method's winner replaces its preset's defaults (:class:`PresetControls`)."""

    method: str
    gain: float | None  # the winner's selection metric minus the control's; None: the control diverged
    replace: bool  # the gain exceeds the margin (or the control diverged)
    settings: dict[str, float | None]  # the winner's settings


def preset_verdicts(spec: TuningSpec, selections: list[MethodSelection]) -> list[PresetVerdict]:
    """The preset-control rule applied to each method whose trials and control have all finished."""
    if spec.preset_controls is None:
        return []
    verdicts = []
    for s in selections:
        winner, control = s.winner, s.control
        if winner is None or control is None or not control.complete:
            continue
        gain = None if control.diverged else winner.means[0] - control.means[0]
        replace = gain is None or gain > spec.preset_controls.margin
        verdicts.append(PresetVerdict(s.method, gain, replace, dict(winner.settings)))
    return verdicts


def selection_markdown(spec: TuningSpec, selections: list[MethodSelection]) -> str:
    """Per method: every trial's settings and held-out scores, and the winner (or how many trials are left)."""
    metrics = [spec.selection.metric, *spec.selection.ties]
    lines = [f"Rule: {spec.selection.rule.strip()}", ""]
    if spec.preset_controls is not None:
        lines += [f"Preset controls: {spec.preset_controls.rule.strip()}", ""]
    verdicts = {v.method: v for v in preset_verdicts(spec, selections)}
    for s in selections:
        done = sum(t.complete for t in s.trials)
        winner = s.winner
        lines += [
            f"### {s.method}",
            "",
            f"{done} of {len(s.trials)} trials finished"
            + (f"; winner: trial {winner.index}" if winner else "; no winner until every trial has finished"),
            "",
            "| trial | " + " | ".join(s.trials[0].settings) + " | " + " | ".join(metrics) + " | ran on |",
            "| ---: | " + " | ".join("---:" for _ in [*s.trials[0].settings, *metrics]) + " | --- |",
        ]
        for t in [*s.trials, *([s.control] if s.control is not None else [])]:
            scores = [f"{v:.2f}" for v in t.means] if t.complete else ["-"] * len(metrics)
            name = "preset" if t.index == CONTROL_INDEX else str(t.index)
            mark = " **(winner)**" if winner is t else ""
            lines.append(
                f"| {name}{mark} | "
                + " | ".join("-" if v is None else f"{v:g}" for v in t.settings.values())
                + " | "
                + " | ".join(scores)
                + f" | {', '.join(sorted(set(t.hardware.values()))) or '-'} |"
            )
        lines.append("")
        lines += _verdict_lines(spec, verdicts.get(s.method))
    return "\n".join(lines)


def _verdict_lines(spec: TuningSpec, verdict: PresetVerdict | None) -> list[str]:
    """The preset-control rule's outcome for one method, as report lines (none without controls)."""
    if spec.preset_controls is None:
        return []
    if verdict is None:
        return ["Preset control: not finished (or the trials are not), no verdict yet.", ""]
    margin = spec.preset_controls.margin
    if verdict.gain is None:
        return ["Preset control: diverged; the preset takes the winner's settings.", ""]
    outcome = (
        "the preset takes the winner's settings"
        if verdict.replace
        else "within the margin: the preset keeps its settings"
    )
    return [f"Winner - preset control: {verdict.gain:+.2f} (margin {margin:g}): {outcome}.", ""]


def hardware_check(spec: TuningSpec, selections: list[MethodSelection], other: Path) -> str:
    """The trials that finished both here and in ``other`` (the same trial and seed on other hardware): each
    paired difference of the selection metric, and their mean with a 95 % t interval (markdown)."""
    from scipy import stats

    others = {(s.method, t.index): t for s in select(spec, other) for t in s.trials if t.complete}
    rows = []
    for s in selections:
        for t in s.trials:
            twin = others.get((s.method, t.index))
            if t.complete and twin is not None:
                rows.append((s.method, t.index, t.means[0], twin.means[0], t.hardware, twin.hardware))
    if not rows:
        return ""
    metric = spec.selection.metric
    lines = [
        f"## Hardware check: trials run twice ({other})",
        "",
        f"The same trial and seed here and there; the two runs draw different random streams, so the difference is "
        f"seed noise plus any effect of the hardware. Metric: {metric}.",
        "",
        "| method | trial | here | there | here - there |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    diffs = [a - b for _, _, a, b, _, _ in rows]
    for method, index, a, b, _, _ in rows:
        lines.append(f"| {method} | {index} | {a:.2f} | {b:.2f} | {a - b:+.2f} |")
    mean = sum(diffs) / len(diffs)
    if len(diffs) > 1:
        sd = stats.tstd(diffs)
        half = stats.t.ppf(0.975, len(diffs) - 1) * sd / len(diffs) ** 0.5
        interval = f"[{mean - half:+.2f}, {mean + half:+.2f}]"
        lines += ["", f"Mean difference {mean:+.2f} {interval} (95 % t, n = {len(diffs)}), s.d. {sd:.2f}."]
    here = sorted({h for *_, hw, _ in rows for h in hw.values()})
    there = sorted({h for *_, hw in rows for h in hw.values()})
    lines += ["", f"Here: {', '.join(here)}; there: {', '.join(there)}.", ""]
    return "\n".join(lines)


def tuned_tree(spec: TuningSpec, selections: list[MethodSelection]) -> dict:
    """The budget study with every tuned method's winning settings, and each inherited cell's source's
    (``extends`` the budget); one ConfigError while a method's trials are unfinished."""
    unfinished = [s.method for s in selections if not s.complete]
    if unfinished:
        raise ConfigError(
            f"tuning is not finished for {', '.join(unfinished)}: run the trials to the end "
            f"(probcl benchmark --config {spec.trials_file}) before writing the tuned settings"
        )
    winners: dict[str, dict[str, Any]] = {}
    for s in selections:
        assert s.winner is not None
        winners[s.method] = dict(s.winner.settings)
    methods: dict[str, Any] = {label: {"overrides": settings} for label, settings in winners.items()}
    for label, settings in winners.items():  # a candidate of its own enters the study with its own entry
        tuned = spec.methods[label]
        if tuned.config is not None:
            methods[label] = {"config": tuned.config, "overrides": {**tuned.overrides, **settings}}
    methods.update({label: {"overrides": dict(winners[i.source])} for label, i in spec.inherit.items()})
    # its own run folder and no publish folder: run by mistake, it cannot overwrite the budget study's published cells
    own = Path(spec.tuned_file or "tuned").stem
    return {"extends": spec.budget, "out": f"runs/{own}", "publish": None, "methods": methods}
