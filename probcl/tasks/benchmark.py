"""`probcl benchmark`: a grid of pretraining runs (methods x seeds [x batch sizes]) under one budget,
each evaluated with the same suites, summarised in ``results.json``, ``report.md`` and ``report.html``.

A cell's config is the base preset, then the method's preset (its ``method``/``method_args`` win),
then the benchmark's ``overrides`` (the shared budget), then the method's own overrides, then the
cell's seed, batch size and run directory ``OUT/cells/<method>-s<seed>[-b<batch>]``. Cells are
resumable: a trained cell (``cell.json`` with the same config) is not retrained, and suites
already in its ``eval.json`` are not re-run.

Cells run seed by seed (every method's seed 0 first), each evaluated as soon as what its suites
need is trained (the reference run of the same seed; for the ``ood`` ensemble, the method's other
seeds). With ``publish: DIR`` every finished cell's small files (config, cell record, eval.json,
metrics) and the rebuilt report are mirrored into DIR after each cell, so a long study can be
committed as it goes and resumed in a later session.
"""

from __future__ import annotations

import copy
import os
import platform
import shutil
import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
import yaml

from probcl.config import Config, ConfigError, from_dict, to_plain
from probcl.core.io import atomic_write_json, atomic_write_text, read_json
from probcl.core.runs import RunPaths
from probcl.errors import RunError
from probcl.report.controls import Control, check_controls

DEFAULT_HEADLINE = {
    "linear top-1 %": "linear/top1",
    "kNN top-1 %": "knn/top1",
    "AUROC digits (MSP)": "ood/sets.digits.msp.auroc",
    "AUROC Gaussian noise (MSP)": "ood/sets.noise:gaussian.msp.auroc",
    "AUROC uniform noise (MSP)": "ood/sets.noise:uniform.msp.auroc",
    "ECE": "calibration/ece",
    "FGSM 8/255 top-1 %": "adversarial/fgsm.eps8",
    "mean corruption top-1 %": "corruptions/mean_top1",
    "s / epoch": "train/seconds_per_epoch",
}
CELL_FILE = "cell.json"
ERROR_FILE = "error.log"  # the traceback of a cell that failed unexpectedly
BASE_ONLY_KEYS = ("method", "method_args", "run_dir", "init")  # taken from the method preset, never the base


@dataclass
class BenchmarkEval:
    """How every cell is evaluated."""

    device: str = "auto"
    batch_size: int = 512
    max_train: int | None = None  # seeded subset of training images for probes and kNN
    data_root: str | None = None


@dataclass
class BenchmarkConfig:
    """A benchmark grid: which methods, seeds and batch sizes, one budget, which suites."""

    title: str = "probcl benchmark"
    description: str = ""  # budget and hardware notes, printed at the top of the report
    out: str = "runs/benchmark"
    publish: str | None = None  # folder (e.g. docs/results/NAME) mirroring finished cells' small files + the report
    claims: list[str] = field(default_factory=list)  # names from probcl.report.claims.CLAIMS: a verdict section
    base: str | None = None  # preset giving shared settings
    methods: dict = field(
        default_factory=dict
    )  # label -> preset path, or {config: path, overrides: {...}, seeds: [...]}
    overrides: dict = field(default_factory=dict)  # dotted keys applied to every cell: the common budget
    seeds: list[int] = field(default_factory=lambda: [0])
    batch_sizes: list[int] | None = None  # optional extra grid axis
    dataset: str | None = None
    suites: list[str] = field(default_factory=lambda: ["linear", "knn"])
    suite_options: dict = field(default_factory=dict)  # {suite: {option: value}}
    reference: str | None = None  # method label: reference run for `efficiency` and `corruptions` (mCE)
    ensemble: bool = False  # `ood` deep ensemble over each method's seeds
    headline: dict = field(default_factory=lambda: dict(DEFAULT_HEADLINE))  # column title -> "suite/metric"
    controls: dict[str, Control] = field(default_factory=dict)  # extra cells read against the ones they vary
    eval: BenchmarkEval = field(default_factory=BenchmarkEval)


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


# ----------------------------------------------------------------------------- configuration


def load_benchmark(path: str | Path) -> tuple[BenchmarkConfig, Path]:
    """Parse and validate a benchmark YAML; returns it and the folder its relative preset paths start from."""
    from probcl.core.presets import resolve_config_path
    from probcl.eval import SUITES

    resolved = resolve_config_path(str(path))
    assert resolved is not None  # a name was given
    path = resolved
    try:
        tree = yaml.safe_load(Path(path).read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"benchmark file {path} is not valid YAML: {e}") from None
    bench = from_dict(BenchmarkConfig, tree, "benchmark")
    if not bench.methods:
        raise ConfigError(f"{path}: `methods` is empty; give at least one `label: preset` entry")
    if not bench.seeds:
        raise ConfigError(f"{path}: `seeds` is empty")
    if bench.reference is not None and bench.reference not in bench.methods:
        raise ConfigError(
            f"{path}: reference {bench.reference!r} is not one of the methods ({', '.join(bench.methods)})"
        )
    from probcl.report.claims import CLAIMS

    for label in bench.methods:
        phase(bench, label)  # a bad phase fails here, before any work
        source = init_source(bench, label)
        if source is not None and source not in bench.methods:
            raise ConfigError(f"{path}: methods.{label}.init_from {source!r} is not one of the methods")
        if source is not None and not set(method_seeds(bench, label)) <= set(method_seeds(bench, source)):
            raise ConfigError(f"{path}: methods.{label} has seeds that its init_from {source!r} lacks")
        if source is not None and phase(bench, source) > phase(bench, label):
            raise ConfigError(f"{path}: methods.{label} runs in an earlier phase than its init_from {source!r}")
    check_controls(bench.controls, bench.methods, str(path))
    unknown = [c for c in bench.claims if c not in CLAIMS]
    if unknown:
        raise ConfigError(f"{path}: unknown claim(s) {', '.join(unknown)}; valid: {', '.join(CLAIMS.names())}")
    if bench.suites == ["all"]:
        bench.suites = SUITES.names()
    SUITES.parse_all(bench.suites, bench.suite_options)  # unknown suites, options and bad values fail here
    return bench, Path(path).parent


def method_seeds(bench: BenchmarkConfig, label: str) -> list[int]:
    """The seeds of one method: its own ``seeds`` entry, else the benchmark's."""
    spec = bench.methods[label]
    return list(spec["seeds"]) if isinstance(spec, dict) and spec.get("seeds") else bench.seeds


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
    from probcl.core.presets import resolve_config_path

    local = base_dir / name
    path = local if local.is_file() else resolve_config_path(name)
    assert path is not None  # a name was given
    try:
        return yaml.safe_load(Path(path).read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"preset {path} is not valid YAML: {e}") from None


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


def _method_spec(bench: BenchmarkConfig, label: str) -> tuple[str, dict]:
    spec = bench.methods[label]
    if isinstance(spec, str):
        return spec, {}
    if isinstance(spec, dict) and isinstance(spec.get("config"), str):
        unknown = set(spec) - {"config", "overrides", "seeds", "init_from", "phase"}
        if unknown:
            raise ConfigError(
                f"methods.{label}: unknown key(s) {', '.join(sorted(unknown))}; "
                "valid: config, overrides, seeds, init_from, phase"
            )
        return spec["config"], dict(spec.get("overrides") or {})
    raise ConfigError(f"methods.{label} must be a preset path or {{config: PATH, overrides: {{...}}}}, got {spec!r}")


def cell_config(bench: BenchmarkConfig, cell: Cell, root: Path, base_dir: Path) -> Config:
    """The validated pretraining config of one cell."""
    tree: dict = {}
    if bench.base:
        base = _preset_tree(bench.base, base_dir)
        merge_into(tree, {k: v for k, v in base.items() if k not in BASE_ONLY_KEYS})
    preset, method_overrides = _method_spec(bench, cell.method)
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


# ----------------------------------------------------------------------------- running


def hardware() -> dict:
    """What the benchmark ran on."""
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [
            line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if line.startswith("model name")
        ]
        cpu = names[0] if names else cpu
    return {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def train_cell(cfg: Config) -> tuple[dict, bool]:
    """Pretrain one cell unless ``cell.json`` records it done with this config; returns its training record
    and whether it trained now."""
    from probcl.errors import ProbclError, TrainingDivergedError
    from probcl.tasks.pretrain import pretrain

    paths = RunPaths(Path(cfg.run_dir))
    record_path = paths.root / CELL_FILE
    record = read_json(record_path)
    wanted = to_plain(cfg.to_dict())
    if record is not None:
        if record["config"] != wanted:
            raise ConfigError(
                f"{paths.root} was trained with a different config; delete that folder or use another --out"
            )
        if not record.get("retry") and (record.get("error") or record.get("restored") or paths.last.exists()):
            return record, False
    start_epoch = (
        int(torch.load(paths.last, map_location="cpu", weights_only=False).get("epoch", 0))
        if paths.last.exists()
        else 0
    )
    start = time.perf_counter()
    record = {"config": wanted, "started_at_epoch": start_epoch}
    try:
        pretrain(cfg)
    except TrainingDivergedError as e:  # deterministic: the same config diverges again, so it is not retried
        record["error"] = str(e)
    except ProbclError:
        raise  # bad input, a stop request (SIGTERM, Ctrl-C), a run in use: the benchmark stops, resumable
    except Exception as e:  # an unexpected failure of this one cell: the others go on; the next run retries it
        atomic_write_text(paths.root / ERROR_FILE, traceback.format_exc())
        first_line = (str(e).splitlines() or [""])[0]
        record.update(error=f"{type(e).__name__}: {first_line} (traceback in {paths.root / ERROR_FILE})", retry=True)
    seconds = time.perf_counter() - start
    record.update(
        seconds=round(seconds, 2),
        epochs=cfg.train.epochs,
        timing="wall time of the pretraining call (data loading, training, per-epoch monitor)",
    )
    if start_epoch == 0:  # a resumed cell's wall time does not cover whole epochs
        record["seconds_per_epoch"] = round(seconds / cfg.train.epochs, 2)
    atomic_write_json(record_path, record)
    return record, True


def cell_suite_options(bench: BenchmarkConfig, cell: Cell, root: Path) -> dict:
    """The benchmark's suite options plus the cell's reference run and ensemble members."""
    options = copy.deepcopy(bench.suite_options)
    cells_dir = root / "cells"
    if bench.reference:
        ref = cells_dir / Cell(bench.reference, cell.seed, cell.batch_size).name
        for suite in ("efficiency", "corruptions"):
            if suite in bench.suites:
                options.setdefault(suite, {}).setdefault("reference", str(ref))
    seeds = method_seeds(bench, cell.method)
    if bench.ensemble and "ood" in bench.suites and len(seeds) > 1:
        others = [str(cells_dir / Cell(cell.method, s, cell.batch_size).name) for s in seeds if s != cell.seed]
        options.setdefault("ood", {}).setdefault("runs", others)
    return options


def evaluate_cell(bench: BenchmarkConfig, cell: Cell, root: Path, suites: list[str] | None = None) -> list[str]:
    """Run the suites (default: all of the benchmark's) missing from the cell's eval.json; returns their names."""
    from probcl.tasks.evaluate import evaluate_run

    run_dir = root / "cells" / cell.name
    done = read_json(RunPaths(run_dir).eval, {})
    missing = [s for s in (bench.suites if suites is None else suites) if s not in done]
    if missing:
        e = bench.eval
        options = {name: opts for name, opts in cell_suite_options(bench, cell, root).items() if name in missing}
        evaluate_run(
            run_dir, missing, e.device, e.batch_size, "backbone", e.max_train, e.data_root, options, figures=False
        )
    return missing


def collect(bench: BenchmarkConfig, cells: list[Cell], root: Path) -> dict:
    """results.json content: every cell's scalar metrics and, per group, their mean/std over seeds."""
    from probcl.tasks.evaluate import scalar_metrics

    rows = []
    for cell in cells:
        run_dir = root / "cells" / cell.name
        record = read_json(run_dir / CELL_FILE, {})
        metrics = {}
        for suite, result in read_json(RunPaths(run_dir).eval, {}).items():
            metrics.update({f"{suite}/{k}": v for k, v in scalar_metrics(result).items()})
        if "seconds_per_epoch" in record:
            metrics["train/seconds_per_epoch"] = record["seconds_per_epoch"]
        rows.append(
            {
                "name": cell.name,
                "group": cell.group,
                "method": cell.method,
                "method_name": record.get("config", {}).get("method"),
                "seed": cell.seed,
                "batch_size": record.get("config", {}).get("train", {}).get("batch_size"),
                "run_dir": str(Path("cells") / cell.name),
                "error": record.get("error"),
                "train": {k: record.get(k) for k in ("seconds", "epochs", "seconds_per_epoch", "started_at_epoch")},
                "metrics": metrics,
            }
        )
    groups: dict[str, dict] = {}
    for row in rows:
        group = groups.setdefault(row["group"], {"method": row["method"], "cells": [], "metrics": {}})
        group["cells"].append(row["name"])
    for name, group in groups.items():
        members = [r for r in rows if r["group"] == name and not r["error"]]
        keys = dict.fromkeys(k for r in members for k in r["metrics"])
        for key in keys:
            values = [r["metrics"][key] for r in members if key in r["metrics"]]
            group["metrics"][key] = {
                "mean": statistics.fmean(values),
                "n": len(values),
                "std": statistics.stdev(values) if len(values) > 1 else None,
            }
    return {
        "title": bench.title,
        "description": bench.description,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "hardware": hardware(),
        "config": to_plain(bench),
        "cells": rows,
        "groups": groups,
    }


def _trained(root: Path, cell: Cell) -> bool:
    record = read_json(root / "cells" / cell.name / CELL_FILE)
    return record is not None and not record.get("error")


def suite_dependencies(bench: BenchmarkConfig, cell: Cell, suite: str) -> list[Cell]:
    """Cells that must be trained before ``suite`` runs on ``cell``: the reference run of its seed
    (``efficiency``, ``corruptions``) and, for the ``ood`` ensemble, the method's other seeds."""
    needs = []
    if bench.reference and suite in ("efficiency", "corruptions"):
        needs.append(Cell(bench.reference, cell.seed, cell.batch_size))
    if bench.ensemble and suite == "ood":
        needs += [Cell(cell.method, s, cell.batch_size) for s in method_seeds(bench, cell.method) if s != cell.seed]
    return [c for c in needs if c != cell]


def ready_suites(bench: BenchmarkConfig, cell: Cell, root: Path) -> list[str]:
    """The suites whose dependencies are trained."""
    return [s for s in bench.suites if all(_trained(root, need) for need in suite_dependencies(bench, cell, s))]


PUBLISHED_FILES = ("config.yaml", "eval.json", "metrics.jsonl", CELL_FILE)  # cell.json last: it marks a copy done


def cell_complete(bench: BenchmarkConfig, run_dir: Path) -> bool:
    """Trained without error and every suite of the benchmark in its eval.json."""
    record = read_json(run_dir / CELL_FILE)
    done = read_json(RunPaths(run_dir).eval, {})
    return record is not None and not record.get("error") and all(s in done for s in bench.suites)


def _copy_files(source: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for name in PUBLISHED_FILES:
        if (source / name).exists():
            shutil.copyfile(source / name, dest / f".{name}.tmp")
            os.replace(dest / f".{name}.tmp", dest / name)


def publish_cell(root: Path, cell: Cell, target: Path) -> None:
    """Mirror a cell's small files (no checkpoints) into ``target/cells/<cell>``."""
    _copy_files(root / "cells" / cell.name, target / "cells" / cell.name)


def restore_published(
    bench: BenchmarkConfig, cells: list[Cell], configs: dict[Cell, Config], root: Path, log: Callable[[str], None]
) -> None:
    """Bring back into ``root`` the complete cells that ``publish`` holds but ``root`` lacks (a later session,
    a fresh checkout): they count as done (no checkpoint: they are not trained or evaluated again)."""
    if not bench.publish:
        return

    def published_complete(cell: Cell) -> bool:
        return cell_complete(bench, Path(bench.publish or "") / "cells" / cell.name)

    for cell in cells:
        source, dest = Path(bench.publish) / "cells" / cell.name, root / "cells" / cell.name
        dependents = [c for c in cells if init_source(bench, c.method) == cell.method and c.seed == cell.seed]
        if not all(published_complete(c) for c in dependents):
            continue  # a cell still to train starts from this one's checkpoint: train it again
        record = read_json(source / CELL_FILE)
        if (dest / CELL_FILE).exists() or record is None or not cell_complete(bench, source):
            continue
        if record["config"] != to_plain(configs[cell].to_dict()):
            log(f"not restoring {cell.name}: {source} was trained with another config")
            continue
        _copy_files(source, dest)
        atomic_write_json(dest / CELL_FILE, {**record, "restored": str(source)})
        log(f"restored {cell.name} from {source}")


def run_benchmark(
    bench: BenchmarkConfig, base_dir: Path, out: str | Path | None = None, log: Callable[[str], None] = print
) -> Path:
    """Train and evaluate every cell (skipping finished work), seed by seed; after each cell that trained or
    was evaluated, write results.json and the reports (and mirror them into ``publish``); a run with nothing
    left to do writes them once."""
    root = Path(out or bench.out)
    cells = grid(bench)
    configs = {cell: cell_config(bench, cell, root, base_dir) for cell in cells}  # every error before any work
    restore_published(bench, cells, configs, root, log)
    reported = False
    for i, cell in enumerate(cells, 1):
        source = init_source(bench, cell.method)
        if source is not None and not _trained(root, Cell(source, cell.seed, cell.batch_size)):
            log(f"[{i}/{len(cells)}] skipped {cell.name}: the cell it starts from ({source}) has not trained")
            continue
        record, changed = train_cell(configs[cell])
        status = (
            f"failed: {record['error'].splitlines()[0]}"
            if record.get("error")
            else f"{record.get('seconds_per_epoch', '-')} s/epoch"
        )
        log(f"[{i}/{len(cells)}] trained {cell.name}: {status}")
        for done in cells[:i]:
            if _trained(root, done) and (root / "cells" / done.name / "checkpoints").exists():
                ran = evaluate_cell(bench, done, root, ready_suites(bench, done, root))
                if ran:
                    log(f"evaluated {done.name}: {', '.join(ran)}")
                    changed = True
        if changed:  # rebuilding costs ~1 min with the study's plots: not for every finished cell on a resume
            rebuild_report(bench, root, log)
            reported = True
    if not reported:
        rebuild_report(bench, root, log)
    retry = [c.name for c in cells if (read_json(root / "cells" / c.name / CELL_FILE) or {}).get("retry")]
    if retry:
        raise RunError(
            f"{len(retry)} cell(s) failed unexpectedly: {', '.join(retry)} (tracebacks in their {ERROR_FILE}); "
            "the other cells and the report are done. Fix the cause and run the same command again: "
            "failed cells are retried from their last checkpoint (delete a cell's folder to start it over), "
            "finished ones are kept."
        )
    return root


def rebuild_report(bench: BenchmarkConfig, out: str | Path | None = None, log: Callable[[str], None] = print) -> Path:
    """Write results.json, report.md and report.html from the cells present under the output folder."""
    from probcl.report.benchmark_report import write_report

    root = Path(out or bench.out)
    cells = [c for c in grid(bench) if (root / "cells" / c.name / CELL_FILE).exists()]
    if not cells:
        raise ConfigError(f"no trained cell under {root / 'cells'}; run `probcl benchmark` without --report-only first")
    results = collect(bench, cells, root)
    atomic_write_json(root / "results.json", results)
    md, html_path = write_report(results, root, bench.headline)
    log(f"results in {root / 'results.json'}, report in {md} and {html_path}")
    if bench.publish:
        target = Path(bench.publish)
        for cell in cells:
            if cell_complete(bench, root / "cells" / cell.name):
                publish_cell(root, cell, target)
        published_cells = [c for c in grid(bench) if (target / "cells" / c.name / CELL_FILE).exists()]
        if not published_cells:
            return root
        published = collect(bench, published_cells, target)
        published["created"] = results["created"]
        atomic_write_json(target / "results.json", published)
        write_report(published, target, bench.headline)
        log(f"published to {target}")
    return root
