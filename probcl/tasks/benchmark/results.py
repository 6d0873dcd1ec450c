"""A benchmark's results: ``results.json`` (every cell's scalar metrics and their mean/std over seeds), the
reports, and the ``publish`` mirror of finished cells' small files that lets a study be committed as it goes
and resumed from a fresh checkout.

Provenance (hardware, torch threads, date, code version) belongs to each cell as it was run: its ``cell.json``
records it when it trains (:func:`provenance`), and ``results.json`` carries each cell's and a summary of them,
never the machine that merely rebuilt the report. So ``results.json`` and the reports are a function of the cells:
restoring a published study in a fresh checkout and rebuilding leaves the published files as they were.
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import subprocess
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import torch

from probcl.config import Config, ConfigError, from_dict, recipe, to_plain
from probcl.core.io import atomic_write_json, read_json
from probcl.core.layout import RunPaths
from probcl.core.metrics_file import read_metrics
from probcl.core.run_lock import RunLock
from probcl.eval.ood import PROBE_OUTPUTS
from probcl.eval.ood_scores.per_image import OOD_SCORES_FILE, load_scores
from probcl.eval.ood_scores.selection import default_decision_metrics
from probcl.report.document import Document
from probcl.tasks.benchmark.grid import BenchmarkConfig, Cell, grid, init_source, method_seeds, method_suites

CELL_FILE = "cell.json"  # a cell's training record: its config, time, provenance, and error if it failed
RESTORED_FILE = "restored.json"  # marks a working copy of a published cell (never published itself)
REPORT_LOCK = ".report.lock"  # held while results.json, the reports and the publish mirror are written


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


def code_version() -> dict:
    """The probcl version and, in a git checkout, its commit (``+dirty`` with uncommitted changes; None outside)."""
    import probcl

    here = Path(probcl.__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", ""
    return {"probcl": probcl.__version__, "commit": (commit + ("+dirty" if dirty else "")) or None}


def provenance() -> dict:
    """Where and when a cell ran, with which code: :func:`hardware`, :func:`code_version` and the UTC time now."""
    return {
        **hardware(),
        "code": code_version(),
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


MACHINE_KEYS = ("cpu", "cpu_count", "torch_threads", "gpu", "torch")  # what makes two cells' machines the same


def provenance_summary(rows: list[dict]) -> dict:
    """results.json's summary of its cells' provenance: each machine (CPU, CPUs, torch threads, GPU, torch) with the
    cells that ran on it, how many cells predate the record, and the first and last date a cell finished."""
    machines: dict[str, dict] = {}
    for row in rows:
        record = row.get("provenance")
        if record:
            machine = {k: record.get(k) for k in MACHINE_KEYS}
            machines.setdefault(repr(machine), {**machine, "cells": 0})["cells"] += 1
    dates = sorted(row["provenance"]["finished"] for row in rows if (row.get("provenance") or {}).get("finished"))
    return {
        "machines": list(machines.values()),
        "not_recorded": sum(not row.get("provenance") for row in rows),
        "first_finished": dates[0] if dates else None,
        "last_finished": dates[-1] if dates else None,
    }


def last_epoch_means(rows: list[dict], keys: list[str]) -> dict[str, float]:
    """The mean of each of ``keys`` over the metrics.jsonl ``rows`` of the last epoch that logged it."""
    out = {}
    for key in keys:
        logged = [r for r in rows if isinstance(r.get(key), (int, float)) and r.get("epoch") is not None]
        if logged:
            last = max(r["epoch"] for r in logged)
            out[key] = statistics.fmean(r[key] for r in logged if r["epoch"] == last)
    return out


def seed_ensembles(bench: BenchmarkConfig, cells: list[Cell], root: Path) -> dict[str, dict]:
    """Each ``seed_ensembles`` method's deep ensemble over its seeds, once every seed's cell has saved its probe
    outputs: ``{method: {"seeds": [...], "sets": {set: {score: metrics}}}}`` (missing while a seed is)."""
    from probcl.eval.ood import seed_ensemble_metrics

    out = {}
    for method in bench.seed_ensembles:
        members = [c for c in cells if c.method == method]
        files = [root / "cells" / c.name / PROBE_OUTPUTS for c in members]
        if len(members) < len(method_seeds(bench, method)) or not all(f.is_file() for f in files):
            continue
        outputs = [torch.load(f, map_location="cpu", weights_only=True) for f in files]
        out[method] = {"seeds": [c.seed for c in members], "sets": seed_ensemble_metrics(outputs)}
    return out


def collect(bench: BenchmarkConfig, cells: list[Cell], root: Path) -> dict:
    """results.json content: every cell's scalar metrics (its suites, its last epoch's ``training_metrics``, the
    deep ensemble of its method's seeds where one is formed, and today's default OOD decision recomputed from its
    saved per-image scores where it saved them: ``ood/sets.NAME.default.auroc``) and, per group, their mean/std
    over seeds."""
    from probcl.tasks.evaluate import scalar_metrics

    ensembles = seed_ensembles(bench, cells, root)
    rows = []
    for cell in cells:
        run_dir = root / "cells" / cell.name
        record = read_json(run_dir / CELL_FILE, {})
        metrics = {}
        for suite, result in read_json(RunPaths(run_dir).eval, {}).items():
            metrics.update({f"{suite}/{k}": v for k, v in scalar_metrics(result).items()})
        if (run_dir / OOD_SCORES_FILE).exists():
            default = default_decision_metrics(load_scores(run_dir / OOD_SCORES_FILE))
            metrics.update({f"ood/{k}": v for k, v in default.items()})
        if "seconds_per_epoch" in record:
            metrics["train/seconds_per_epoch"] = record["seconds_per_epoch"]
        if bench.training_metrics:
            metrics.update(last_epoch_means(read_metrics(run_dir), bench.training_metrics))
        if cell.method in ensembles:
            sets = ensembles[cell.method]["sets"]
            metrics.update({f"ood/sets.{k}": v for k, v in scalar_metrics(sets).items()})
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
                "train": {
                    **{k: record.get(k) for k in ("seconds", "epochs", "seconds_per_epoch", "started_at_epoch")},
                    # what the run trained in (cells from before this was recorded: the precision configured)
                    "precision": record.get("precision") or record.get("config", {}).get("train", {}).get("precision"),
                },
                "provenance": record.get("provenance"),  # as the cell ran (None: it predates the record)
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
        "provenance": provenance_summary(rows),  # the cells' own, never the machine that rebuilt this file
        # the precisions the cells trained in: one, for results that compare cells (a study pins it)
        "precisions": sorted({str(row["train"]["precision"]) for row in rows}),
        "config": to_plain(bench),
        "cells": rows,
        "groups": groups,
        "ensembles": {method: {"seeds": e["seeds"]} for method, e in ensembles.items()},
    }


# cell.json last: it marks a copy done; the probe outputs exist for seed_ensembles methods only
PUBLISHED_FILES = ("config.yaml", "eval.json", "metrics.jsonl", PROBE_OUTPUTS, OOD_SCORES_FILE, CELL_FILE)


def cell_complete(bench: BenchmarkConfig, cell: Cell, run_dir: Path) -> bool:
    """Trained without error and every suite of the cell's method in its eval.json."""
    record = read_json(run_dir / CELL_FILE)
    done = read_json(RunPaths(run_dir).eval, {})
    return record is not None and not record.get("error") and all(s in done for s in method_suites(bench, cell.method))


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
    a fresh checkout): their files copied unchanged and marked by a ``restored.json`` beside them, they count as
    done (no checkpoint: they are not trained or evaluated again)."""
    if not bench.publish:
        return

    def published_complete(cell: Cell) -> bool:
        return cell_complete(bench, cell, Path(bench.publish or "") / "cells" / cell.name)

    for cell in cells:
        source, dest = Path(bench.publish) / "cells" / cell.name, root / "cells" / cell.name
        dependents = [c for c in cells if init_source(bench, c.method) == cell.method and c.seed == cell.seed]
        if not all(published_complete(c) for c in dependents):
            continue  # a cell still to train starts from this one's checkpoint: train it again
        record = read_json(source / CELL_FILE)
        if (dest / CELL_FILE).exists() or record is None or not cell_complete(bench, cell, source):
            continue
        if recipe(record["config"]) != recipe(to_plain(configs[cell].to_dict())):
            log(f"not restoring {cell.name}: {source} was trained with another config")
            continue
        _copy_files(source, dest)  # byte for byte: publishing the working copy back changes nothing
        atomic_write_json(dest / RESTORED_FILE, {"from": str(source)})
        log(f"restored {cell.name} from {source}")


def rebuild_report(bench: BenchmarkConfig, out: str | Path | None = None, log: Callable[[str], None] = print) -> Path:
    """Write results.json, report.md and report.html from the cells present under the output folder (one
    writer at a time: a benchmark worker waits while another rebuilds them)."""
    root = Path(out or bench.out)
    with RunLock(root, "benchmark", filename=REPORT_LOCK, wait=log):
        return _rebuild_report(bench, root, log)


def _rebuild_report(bench: BenchmarkConfig, root: Path, log: Callable[[str], None]) -> Path:
    from probcl.report.benchmark_report import write_report
    from probcl.tasks.benchmark.budgets import load_budgets

    cells = [c for c in grid(bench) if (root / "cells" / c.name / CELL_FILE).exists()]
    published_cells = [
        c for c in grid(bench) if bench.publish and (Path(bench.publish) / "cells" / c.name / CELL_FILE).exists()
    ]
    if not cells and not published_cells:
        raise ConfigError(f"no trained cell under {root / 'cells'}; run `probcl benchmark` without --report-only first")
    if cells:
        results = collect(bench, cells, root)
        atomic_write_json(root / "results.json", results)
        md, html_path = write_report(results, root, bench.headline, load_budgets(bench, results))
        log(f"results in {root / 'results.json'}, report in {md} and {html_path}")
    else:  # a checkout with the published cells only: their results and report, by this code
        log(f"no cell under {root / 'cells'}: rebuilding the published results from {bench.publish}")
    if bench.publish:
        target = Path(bench.publish)
        for cell in cells:
            if cell_complete(bench, cell, root / "cells" / cell.name):
                publish_cell(root, cell, target)
        published_cells = [c for c in grid(bench) if (target / "cells" / c.name / CELL_FILE).exists()]
        if not published_cells:
            return root
        published = collect(bench, published_cells, target)
        atomic_write_json(target / "results.json", published)
        write_report(published, target, bench.headline, load_budgets(bench, published))
        log(f"published to {target}")
    return root


def published_report(folder: Path, root: Path = Path(".")) -> Document:
    """The report of a published ``results.json`` (its folder, e.g. ``docs/results/study-fmnist-v2``), rebuilt from
    that file alone with the config it carries (other budgets' results read under ``root``): what the folder's
    report.md must say. Figures are drawn under ``folder/plots``."""
    from probcl.report.benchmark_report import report_document
    from probcl.tasks.benchmark.budgets import load_budgets

    results = read_json(folder / "results.json")
    if results is None:
        raise ConfigError(f"no results.json in {folder}")
    bench = from_dict(BenchmarkConfig, results["config"], f"{folder / 'results.json'} config")
    return report_document(results, folder, bench.headline, load_budgets(bench, results, root))


def write_published_report(folder: Path, root: Path = Path(".")) -> Path:
    """Rewrite ``folder``'s report.md and report.html from its results.json (:func:`published_report`)."""
    from probcl.report.benchmark_report import write_document

    return write_document(published_report(folder, root), folder)[0]
