"""A benchmark's grid: the config (methods, seeds, batch sizes, one budget, suites, claims, controls),
its cells in the order they run, and each cell's pretraining config.

A cell's config is the base preset, then the method's preset (its ``method``/``method_args`` win),
then the benchmark's ``overrides`` (the shared budget), then the method's own overrides, then the
cell's seed, batch size and run directory ``OUT/cells/<method>-s<seed>[-b<batch>]``. A benchmark file may
``extends`` another one (:mod:`probcl.tasks.benchmark.extends`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from probcl.config import INFERENCE_BATCH_SIZE, AtLeast, Config, ConfigError, OneOf, from_dict
from probcl.report.claims import parse_claims
from probcl.report.controls import Control, check_controls
from probcl.tasks.benchmark.extends import preset_path, read_tree, resolve_extends

DEFAULT_HEADLINE = {
    "linear top-1 %": "linear/top1",
    "kNN top-1 %": "knn/top1",
    # OOD columns: the combined score, the one the docs recommend (each set's best single score is in the report)
    "AUROC digits (combined)": "ood/sets.digits.combined.auroc",
    "AUROC Gaussian noise (combined)": "ood/sets.noise:gaussian.combined.auroc",
    "AUROC uniform noise (combined)": "ood/sets.noise:uniform.combined.auroc",
    "ECE": "calibration/ece",
    "FGSM 8/255 top-1 %": "adversarial/fgsm.eps8",
    "mean corruption top-1 %": "corruptions/mean_top1",
    "s / epoch": "train/seconds_per_epoch",
}
BASE_ONLY_KEYS = ("method", "method_args", "run_dir", "init")  # taken from the method preset, never the base


@dataclass
class BenchmarkEval:
    """How every cell is evaluated."""

    device: str = "auto"  # auto (CUDA when present), cpu, cuda, ...
    batch_size: Annotated[int, AtLeast(1)] = INFERENCE_BATCH_SIZE  # inference batch: images per forward pass
    max_train: Annotated[int | None, AtLeast(1)] = None  # seeded subset of training images for probes and kNN
    data_root: str | None = None  # data root (default: each cell's data.root, $PROBCL_DATA)


@dataclass
class BenchmarkConfig:
    """A benchmark grid: which methods, seeds and batch sizes, one budget, which suites."""

    title: str = "probcl benchmark"  # the report's title
    description: str = ""  # budget and hardware notes, printed at the top of the report
    out: str = "runs/benchmark"  # the benchmark's folder: cells/, results.json, report.md, report.html
    publish: str | None = None  # folder (e.g. docs/results/NAME) mirroring finished cells' small files + the report
    claims: dict = field(default_factory=dict)  # name -> claim, as data (probcl.report.claims): a verdict section
    base: str | None = None  # preset giving shared settings
    methods: dict = field(
        default_factory=dict
    )  # label -> preset path, or {config: path, overrides: {...}, seeds: [...]}
    overrides: dict = field(default_factory=dict)  # dotted keys applied to every cell: the common budget
    seeds: list[int] = field(default_factory=lambda: [0])  # seeds of every method (a method's own `seeds` wins)
    batch_sizes: list[int] | None = None  # optional extra grid axis
    dataset: str | None = None  # data.dataset of every cell (default: each preset's)
    suites: list[str] = field(default_factory=lambda: ["linear", "knn"])  # suites run on every cell, or [all]
    suite_options: dict = field(default_factory=dict)  # {suite: {option: value}}
    reference: str | None = None  # method label: reference run for `efficiency` and `corruptions` (mCE)
    ensemble: bool = False  # `ood` deep ensemble over each method's seeds (needs every seed's checkpoint at once)
    # methods whose seeds form a deep ensemble from each cell's saved probe outputs on the `ood` images, formed when
    # the last seed's cell lands (no checkpoints needed): ood/sets.SET.ensemble_msp|ensemble_entropy in its cells
    seed_ensembles: list[str] = field(default_factory=list)
    # metrics.jsonl columns (e.g. train/bank_query_cos) whose mean over each cell's last epoch enters results.json
    training_metrics: list[str] = field(default_factory=list)
    headline: dict = field(default_factory=lambda: dict(DEFAULT_HEADLINE))  # column title -> "suite/metric"
    controls: dict[str, Control] = field(default_factory=dict)  # extra cells read against the ones they vary
    budgets: dict[str, str] = field(default_factory=dict)  # label -> benchmark config: verdicts at each, side by side
    # the batch-sweep figure's lines: label -> method labels trained at different batch sizes (their configs may differ
    # beyond it, e.g. a lr scaled with the batch); default: the methods whose configs differ only in the batch size
    sweeps: dict[str, list[str]] = field(default_factory=dict)
    eval: BenchmarkEval = field(default_factory=BenchmarkEval)
    # "heldout": a tuning grid, scored on held-out *training* images only (the `heldout` suite; the test split and
    # the never_load_classes are never loaded: probcl.tasks.tuning.check_heldout_protocol, checked before any work)
    data_protocol: Annotated[str, OneOf(("test", "heldout"))] = "test"
    never_load_classes: list[int] = field(default_factory=list)  # data_protocol heldout: classes no cell may load


@dataclass(frozen=True)
class Cell:
    """One grid point."""

    method: str
    seed: int
    batch_size: int | None = None

    @property
    def name(self) -> str:
        return f"{self.method}-s{self.seed}" + (f"-b{self.batch_size}" if self.batch_size else "")

    @property
    def group(self) -> str:
        """The cell's row in the report: seeds are aggregated, batch sizes are not."""
        return self.method + (f" (batch {self.batch_size})" if self.batch_size else "")


def load_benchmark(path: str | Path) -> tuple[BenchmarkConfig, Path]:
    """Parse and validate a benchmark YAML; returns it and the folder its relative preset paths start from."""
    from probcl.core.presets import resolve_config_path
    from probcl.eval import SUITES

    resolved = resolve_config_path(str(path))
    assert resolved is not None  # a name was given
    path = resolved
    tree = resolve_extends(read_tree(path, "benchmark file"), Path(path))  # `extends`: .extends
    if "method" in tree and "methods" not in tree:  # one method: a pretraining config
        raise ConfigError(
            f"{path} is a pretraining config (one `method`), not a benchmark: train it with `probcl pretrain "
            f"--config {path}`, or name it under `methods:` of a benchmark file (`probcl list presets`)"
        )
    bench = from_dict(BenchmarkConfig, tree, "benchmark")
    if not bench.methods:
        raise ConfigError(f"{path}: `methods` is empty; give at least one `label: preset` entry")
    if not bench.seeds:
        raise ConfigError(f"{path}: `seeds` is empty")
    if bench.reference is not None and bench.reference not in bench.methods:
        raise ConfigError(
            f"{path}: reference {bench.reference!r} is not one of the methods ({', '.join(bench.methods)})"
        )
    for label in bench.methods:
        phase(bench, label)  # a bad phase fails here, before any work
        source = init_source(bench, label)
        if source is not None and source not in bench.methods:
            raise ConfigError(f"{path}: methods.{label}.init_from {source!r} is not one of the methods")
        if source is not None and not set(method_seeds(bench, label)) <= set(method_seeds(bench, source)):
            raise ConfigError(f"{path}: methods.{label} has seeds that its init_from {source!r} lacks")
        if source is not None and phase(bench, source) > phase(bench, label):
            raise ConfigError(f"{path}: methods.{label} runs in an earlier phase than its init_from {source!r}")
    for label in bench.seed_ensembles:
        if label not in bench.methods or len(method_seeds(bench, label)) < 2 or "ood" not in bench.suites:
            raise ConfigError(
                f"{path}: seed_ensembles entry {label!r} must be one of the methods, with two or more seeds, "
                "and the ood suite must run"
            )
    for label, name in bench.budgets.items():
        try:
            resolve_config_path(name)
        except ConfigError as e:
            raise ConfigError(f"{path}: budgets.{label}: {e}") from None
    for label, members in bench.sweeps.items():
        unknown = [m for m in members if m not in bench.methods]
        if unknown or len(members) < 2:
            raise ConfigError(
                f"{path}: sweeps.{label} must list two or more of the methods"
                + (f" ({', '.join(unknown)} is not one)" if unknown else "")
            )
    check_controls(bench.controls, bench.methods, str(path))
    parse_claims(bench.claims, f"{path}: claims")  # a malformed claim fails here, before any work
    if bench.suites == ["all"]:
        bench.suites = SUITES.names()
    SUITES.parse_all(bench.suites, bench.suite_options)  # unknown suites, options and bad values fail here
    for label in bench.methods:
        method_suites(bench, label)  # a method's own suites must be among them
    if bench.data_protocol == "heldout":
        from probcl.tasks.tuning import check_heldout_protocol

        check_heldout_protocol(bench, Path(path).parent, str(path))
    return bench, Path(path).parent


def method_seeds(bench: BenchmarkConfig, label: str) -> list[int]:
    """The seeds of one method: its own ``seeds`` entry, else the benchmark's."""
    spec = bench.methods[label]
    return list(spec["seeds"]) if isinstance(spec, dict) and spec.get("seeds") else bench.seeds


def method_suites(bench: BenchmarkConfig, label: str) -> list[str]:
    """The suites run on one method's cells: its own ``suites`` entry (a subset of the benchmark's, e.g. only
    what its claim reads, to save evaluation time), else the benchmark's."""
    spec = bench.methods[label]
    own = spec.get("suites") if isinstance(spec, dict) else None
    if own is None:
        return list(bench.suites)
    if not isinstance(own, list) or not own or not set(own) <= set(bench.suites):
        raise ConfigError(
            f"methods.{label}.suites must be a non-empty list of the benchmark's suites "
            f"({', '.join(bench.suites)}), got {own!r}"
        )
    return list(own)


def init_source(bench: BenchmarkConfig, label: str) -> str | None:
    """The method whose same-seed cell initialises ``label``'s cells (``init_from``), if any."""
    spec = bench.methods[label]
    return spec.get("init_from") if isinstance(spec, dict) else None


def _own_seeds(bench: BenchmarkConfig, label: str) -> bool:
    spec = bench.methods[label]
    return isinstance(spec, dict) and bool(spec.get("seeds"))


def phase(bench: BenchmarkConfig, label: str) -> int:
    """When a method's cells run: its ``phase`` entry, else 0 (the main grid) or 1 (methods with their own
    ``seeds``: controls and sweeps). Phases run in order, each seed by seed."""
    spec = bench.methods[label]
    value = spec.get("phase") if isinstance(spec, dict) else None
    if value is None:
        return int(_own_seeds(bench, label))
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"methods.{label}.phase must be a whole number >= 0 (0 = main grid), got {value!r}")
    return value


def grid(bench: BenchmarkConfig) -> list[Cell]:
    """All cells, phase by phase (see :func:`phase`), each phase seed by seed; within a seed the reference
    method first and every ``init_from`` source before the methods it initialises, then the listed order."""
    order = sorted(bench.methods, key=lambda m: (m != bench.reference, init_source(bench, m) is not None))
    phases = sorted({phase(bench, m) for m in order})
    batches: list[int | None] = [*bench.batch_sizes] if bench.batch_sizes else [None]
    cells = []
    for methods in ([m for m in order if phase(bench, m) == p] for p in phases):
        seeds = sorted({s for m in methods for s in method_seeds(bench, m)})
        cells += [Cell(m, s, b) for s in seeds for m in methods for b in batches if s in method_seeds(bench, m)]
    return cells


def _preset_tree(name: str, base_dir: Path) -> dict:
    return read_tree(preset_path(name, base_dir), "preset")


def merge_into(tree: dict, updates: dict) -> dict:
    """Deep-merge ``updates`` (keys may be dotted: ``train.epochs``) into ``tree``; lists are replaced."""
    for key, value in updates.items():
        *parents, leaf = str(key).split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"cannot set {key}: {part} is not a section")
        if isinstance(value, dict) and isinstance(node.get(leaf), dict):
            merge_into(node[leaf], value)
        else:
            node[leaf] = copy.deepcopy(value)
    return tree


def method_spec(bench: BenchmarkConfig, label: str) -> tuple[str, dict]:
    """A method entry's (preset, overrides)."""
    spec = bench.methods[label]
    if isinstance(spec, str):
        return spec, {}
    if isinstance(spec, dict) and isinstance(spec.get("config"), str):
        unknown = set(spec) - {"config", "overrides", "seeds", "init_from", "phase", "suites"}
        if unknown:
            raise ConfigError(
                f"methods.{label}: unknown key(s) {', '.join(sorted(unknown))}; "
                "valid: config, overrides, seeds, init_from, phase, suites"
            )
        return spec["config"], dict(spec.get("overrides") or {})
    raise ConfigError(f"methods.{label} must be a preset path or {{config: PATH, overrides: {{...}}}}, got {spec!r}")


def cell_config(bench: BenchmarkConfig, cell: Cell, root: Path, base_dir: Path) -> Config:
    """The validated pretraining config of one cell."""
    tree: dict = {}
    if bench.base:
        base = _preset_tree(bench.base, base_dir)
        merge_into(tree, {k: v for k, v in base.items() if k not in BASE_ONLY_KEYS})
    preset, method_overrides = method_spec(bench, cell.method)
    merge_into(tree, _preset_tree(preset, base_dir))
    merge_into(tree, bench.overrides)
    merge_into(tree, method_overrides)
    cell_keys: dict[str, Any] = {"run_dir": str(root / "cells" / cell.name), "train.seed": cell.seed}
    if cell.batch_size:
        cell_keys["train.batch_size"] = cell.batch_size
    if bench.dataset:
        cell_keys["data.dataset"] = bench.dataset
    source = init_source(bench, cell.method)
    if source is not None:
        cell_keys["init"] = str(root / "cells" / Cell(source, cell.seed, cell.batch_size).name)
    merge_into(tree, cell_keys)
    try:
        return from_dict(Config, tree).validate()
    except ConfigError as e:
        raise ConfigError(f"cell {cell.name}: {e}") from None
