"""`probcl benchmark`: a grid of pretraining runs (methods x seeds [x batch sizes]) under one budget,
each evaluated with the same suites, summarised in ``results.json``, ``report.md`` and ``report.html``.

The grid and each cell's config are :mod:`probcl.tasks.benchmark.grid`; results, reports and the
``publish`` mirror are :mod:`probcl.tasks.benchmark.results`. This module runs the cells. They are
resumable: a trained cell (``cell.json`` with the same config) is not retrained, and suites already in
its ``eval.json`` are not re-run.

Cells run phase by phase, seed by seed (every method's seed 0 first), each evaluated as soon as what its
suites need is trained (the reference run of the same seed; for the ``ood`` ensemble, the method's other
seeds). With ``publish: DIR`` every finished cell's small files (config, cell record, eval.json,
metrics) and the rebuilt report are mirrored into DIR after each cell, so a long study can be
committed as it goes and resumed in a later session.
"""

from __future__ import annotations

import copy
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from probcl.config import Config, ConfigError, recipe, to_plain
from probcl.core.io import atomic_write_json, atomic_write_text, read_json
from probcl.core.layout import RunPaths
from probcl.core.run_lock import RunLock
from probcl.errors import RunError, RunInUseError
from probcl.runtime.precision import resolve_precision
from probcl.tasks.benchmark.grid import (
    BenchmarkConfig,
    Cell,
    cell_config,
    grid,
    init_source,
    method_seeds,
    method_suites,
)
from probcl.tasks.benchmark.results import CELL_FILE, RESTORED_FILE, provenance, rebuild_report, restore_published

ERROR_FILE = "error.log"  # the traceback of a cell that failed unexpectedly
CLAIM_FILE = ".claim"  # a benchmark worker's hold on a cell while it trains or evaluates it


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
        if recipe(record["config"]) != recipe(wanted):
            raise ConfigError(
                f"{paths.root} was trained with a different config; delete that folder or use another --out"
            )
        restored = (paths.root / RESTORED_FILE).exists()
        if not record.get("retry") and (record.get("error") or restored or paths.last.exists()):
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
        precision=resolve_precision(cfg.train.precision, cfg.train.accelerator).precision,
        timing="wall time of the pretraining call (data loading, training, per-epoch monitor)",
        provenance=provenance(),
    )
    trained_epochs = cfg.train.epochs - start_epoch
    if trained_epochs > 0:  # a resumed call's rate is over the epochs it trained (its start-up included)
        record["seconds_per_epoch"] = round(seconds / trained_epochs, 2)
    if start_epoch:
        record["timing"] += f"; resumed at epoch {start_epoch}: seconds cover this call's {trained_epochs} epochs"
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
    if cell.method in bench.seed_ensembles:
        options.setdefault("ood", {})["keep_probe_outputs"] = True
    if bench.ensemble and "ood" in bench.suites and len(seeds) > 1:
        others = [str(cells_dir / Cell(cell.method, s, cell.batch_size).name) for s in seeds if s != cell.seed]
        options.setdefault("ood", {}).setdefault("runs", others)
    return options


def evaluate_cell(bench: BenchmarkConfig, cell: Cell, root: Path, suites: list[str] | None = None) -> list[str]:
    """Run the suites (default: all of the benchmark's) missing from the cell's eval.json; returns their names."""
    from probcl.tasks.evaluate import EvaluateSettings, evaluate_run

    run_dir = root / "cells" / cell.name
    done = read_json(RunPaths(run_dir).eval, {})
    missing = [s for s in (method_suites(bench, cell.method) if suites is None else suites) if s not in done]
    if missing:
        e = bench.eval
        options = {name: opts for name, opts in cell_suite_options(bench, cell, root).items() if name in missing}
        settings = EvaluateSettings(
            device=e.device,
            batch_size=e.batch_size,
            max_train=e.max_train,
            data_root=e.data_root,
            options=options,
            figures=False,
            store_features=False,  # each cell's suites run in one evaluation: a feature cache would only cost disk
        )
        evaluate_run(run_dir, missing, settings)
    return missing


def _restored(root: Path, cell: Cell) -> bool:
    return (root / "cells" / cell.name / RESTORED_FILE).exists()


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
    """The cell's suites whose dependencies are trained."""
    suites = method_suites(bench, cell.method)
    return [s for s in suites if all(_trained(root, need) for need in suite_dependencies(bench, cell, s))]


def claim(root: Path, cell: Cell, wait: Callable[[str], None] | None = None) -> RunLock:
    """One worker per cell: the lock a benchmark process holds on a cell while it trains or evaluates it
    (:class:`~probcl.errors.RunInUseError` when another holds it, unless ``wait``)."""
    return RunLock(root / "cells" / cell.name, "benchmark", filename=CLAIM_FILE, wait=wait)


def evaluate_ready(
    bench: BenchmarkConfig, root: Path, cells: list[Cell], log: Callable[[str], None], wait: bool = False
) -> bool:
    """Run the ready suites of the trained ``cells``; a cell another worker holds is left to it, or with
    ``wait`` waited for. Returns whether any suite ran."""
    changed = False
    for done in cells:
        if not (_trained(root, done) and (root / "cells" / done.name / "checkpoints").exists()):
            continue
        try:
            with claim(root, done, log if wait else None):
                ran = evaluate_cell(bench, done, root, ready_suites(bench, done, root))
        except RunInUseError:
            continue  # its worker evaluates it when it is done with it
        if ran:
            log(f"evaluated {done.name}: {', '.join(ran)}")
            changed = True
    return changed


def run_benchmark(
    bench: BenchmarkConfig,
    base_dir: Path,
    out: str | Path | None = None,
    log: Callable[[str], None] = print,
    report: bool = True,
    seeds: set[int] | None = None,
) -> Path:
    """Train and evaluate every cell (skipping finished work), seed by seed; after each cell that trained or
    was evaluated, write results.json and the reports (and mirror them into ``publish``); a run with nothing
    left to do writes them once. With ``report=False`` no report is written (nor anything published): many
    workers leave that to one ``--report-only`` run at the end instead of queueing for the report's lock.
    With ``seeds``, only the cells of those seeds are trained (machines split a grid by seed, so that the cells
    a paired comparison reads, which share a seed, run on one kind of hardware); ready cells are evaluated.

    Several processes (on one machine, or on several sharing the output folder) may run the same benchmark:
    each claims a cell before it trains or evaluates it and moves on past the cells others hold, and the
    last to finish evaluates what the others' cells made ready."""
    root = Path(out or bench.out)
    cells = grid(bench)
    configs = {cell: cell_config(bench, cell, root, base_dir) for cell in cells}  # every error before any work
    if seeds is not None:
        unknown = sorted(seeds - {c.seed for c in cells})
        if unknown:
            raise ConfigError(
                f"--seeds {','.join(map(str, unknown))}: no cell of the grid has that seed "
                f"(its seeds: {', '.join(map(str, sorted({c.seed for c in cells})))})"
            )
    restore_published(bench, cells, configs, root, log)
    reported = False
    for i, cell in enumerate(cells, 1):
        if seeds is not None and cell.seed not in seeds:
            continue
        source = init_source(bench, cell.method)
        if source is not None and not _trained(root, Cell(source, cell.seed, cell.batch_size)):
            log(f"[{i}/{len(cells)}] skipped {cell.name}: the cell it starts from ({source}) has not trained")
            continue
        try:
            with claim(root, cell):
                record, changed = train_cell(configs[cell])
        except RunInUseError as e:
            log(f"[{i}/{len(cells)}] skipped {cell.name}: another worker has it ({e.owner})")
            continue
        if record.get("error"):
            status = f"failed: {record['error'].splitlines()[0]}"
        elif not changed:  # trained in an earlier run, or restored from the published copy: nothing ran now
            status = "restored from the published copy" if _restored(root, cell) else "trained in an earlier run"
        else:
            status = f"{record.get('seconds_per_epoch', '-')} s/epoch"
            if record.get("started_at_epoch"):
                status += f" (resumed at epoch {record['started_at_epoch']})"
        log(f"[{i}/{len(cells)}] {'trained' if changed else 'done'} {cell.name}: {status}")
        changed = evaluate_ready(bench, root, cells[:i], log) or changed
        # rebuilding costs ~1 min with the study's plots: not for every finished cell on a resume
        if changed and report:
            rebuild_report(bench, root, log)
            reported = True
    # what other workers' cells made ready meanwhile (a cell another worker is evaluating is waited for)
    if (evaluate_ready(bench, root, cells, log, wait=True) or not reported) and report:
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
