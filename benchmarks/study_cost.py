"""What a study cost: CPU-hours per method, from what each published cell recorded when it ran.

    python benchmarks/study_cost.py docs/results/study-v3-tuning docs/results/study-fmnist-v3 \\
        [--out docs/results/study-v3-cost.json]

Each folder is a published benchmark (``cells/NAME/cell.json``, and ``eval.json`` where the cell was evaluated). Per
cell: its training time is the pretraining call's wall seconds as ``cell.json`` records them; a cell resumed after
an interruption recorded only its last call, so its training is that call's seconds per epoch (recorded, or for
cells recorded before resumed calls kept their rate, the call's seconds over the epochs it trained) times its
epochs, marked estimated, and a cell whose last call had no epoch left to train takes the median seconds per epoch
of its group on the same kind of hardware (marked estimated). Its evaluation time is the sum of the suites' own
``seconds`` in ``eval.json``. CPU-hours are those wall seconds times the torch threads the cell ran with (one for
the study's cells), so they count a core-hour per thread-hour whether or not the machine was shared. A cell that ran
on a GPU (``provenance.gpu``) is counted apart, as its wall minutes on the device ("cell-minutes"): the cells of one
device call shared one GPU, so their minutes add up to more than the device was held.

Groups are cell names without the seed (``simclr-b16-authors-s3`` -> ``simclr-b16-authors``; tuning trials
``byol-t4-s0`` -> ``byol`` trials). Prints one Markdown table per folder, and with several folders one more that sums
each group over all of them (a method's whole cost), and writes the JSON (and the Markdown next to it).
"""

from __future__ import annotations

import argparse
import re
import statistics
from collections import defaultdict
from pathlib import Path

from probcl.core.io import atomic_write_json, atomic_write_text, read_json

SEED_SUFFIX = re.compile(r"-s\d+$")
TRIAL_SUFFIX = re.compile(r"-(t\d+|preset)$")
COLUMNS = ("cpu_cells", "gpu_cells", "cpu_hours_train", "cpu_hours_eval", "gpu_minutes", "estimated")


def group_of(cell: str) -> str:
    """The cell's group: its name without the seed, and a tuning trial's without its trial."""
    return TRIAL_SUFFIX.sub("", SEED_SUFFIX.sub("", cell))


def eval_seconds(cell_dir: Path) -> float:
    """The evaluation suites' own seconds (0 when the cell has no eval.json)."""
    path = cell_dir / "eval.json"
    if not path.exists():
        return 0.0
    results = read_json(path)
    return float(
        sum(
            suite.get("protocol", {}).get("seconds", 0.0) or 0.0
            for suite in results.values()
            if isinstance(suite, dict)
        )
    )


def read_cell(cell_dir: Path) -> dict:
    """One cell's record: group, hardware, threads, training and evaluation seconds (training None when the last
    call trained no epoch: filled in by :func:`fill_estimates`)."""
    record = read_json(cell_dir / "cell.json")
    provenance = record.get("provenance", {})
    epochs, started = int(record.get("epochs") or 0), int(record.get("started_at_epoch") or 0)
    seconds, per_epoch = float(record.get("seconds") or 0.0), record.get("seconds_per_epoch")
    extrapolated = bool(started)  # a resumed cell: its earlier calls' time is the last call's rate times their epochs
    if started and not per_epoch and epochs > started:  # recorded before cells kept a resumed call's own rate
        per_epoch = seconds / (epochs - started)
    if not started:
        train = seconds
    elif per_epoch:
        train = float(per_epoch) * epochs
    else:
        train = None
    return {
        "cell": cell_dir.name,
        "group": group_of(cell_dir.name),
        "hardware": "gpu" if provenance.get("gpu") else "cpu",
        "device": provenance.get("gpu") or provenance.get("cpu"),
        "threads": int(provenance.get("torch_threads") or 1),
        "epochs": epochs,
        "train_seconds": train,
        "seconds_per_epoch": per_epoch,
        "eval_seconds": eval_seconds(cell_dir),
        "estimated": train is None or extrapolated,
    }


def fill_estimates(cells: list[dict]) -> None:
    """Training seconds of the cells whose last call trained nothing: the median seconds per epoch of the cells
    of their group on the same hardware, times their epochs."""
    rates = defaultdict(list)
    for cell in cells:
        if cell["seconds_per_epoch"]:
            rates[cell["group"], cell["hardware"]].append(float(cell["seconds_per_epoch"]))
    for cell in cells:
        if cell["train_seconds"] is None:
            same = rates.get((cell["group"], cell["hardware"]))
            cell["train_seconds"] = statistics.median(same) * cell["epochs"] if same else 0.0


def summarise(cells: list[dict]) -> dict:
    """Per group and in total: cells by hardware, CPU-hours (training, evaluation) and device wall minutes."""
    groups: dict[str, dict] = {}
    for cell in cells:
        row = groups.setdefault(cell["group"], dict.fromkeys(COLUMNS, 0))
        row["estimated"] += int(cell["estimated"])
        if cell["hardware"] == "gpu":
            row["gpu_cells"] += 1
            row["gpu_minutes"] += (cell["train_seconds"] + cell["eval_seconds"]) / 60
        else:
            row["cpu_cells"] += 1
            row["cpu_hours_train"] += cell["train_seconds"] * cell["threads"] / 3600
            row["cpu_hours_eval"] += cell["eval_seconds"] * cell["threads"] / 3600
    return with_total(groups)


def with_total(groups: dict[str, dict]) -> dict:
    """The groups, sorted by name, and their column sums."""
    total = {key: sum(row[key] for row in groups.values()) for key in COLUMNS}
    return {"groups": dict(sorted(groups.items())), "total": total}


def cost_of(folder: Path) -> dict:
    """The cells of one published benchmark and their summary."""
    cells = [read_cell(path.parent) for path in sorted((folder / "cells").glob("*/cell.json"))]
    fill_estimates(cells)
    return {"folder": str(folder), "cells": cells, **summarise(cells)}


def across_folders(costs: list[dict]) -> dict:
    """Per group, summed over every folder (a method's tuning trials, its study cells at each budget and split)."""
    groups: dict[str, dict] = {}
    for cost in costs:
        for name, row in cost["groups"].items():
            into = groups.setdefault(name, dict.fromkeys(COLUMNS, 0))
            for key in COLUMNS:
                into[key] += row[key]
    return with_total(groups)


def table(title: str, summary: dict) -> list[str]:
    """One Markdown table: a row per group and the total."""
    lines = [
        f"### {title}",
        "",
        "| group | CPU cells | CPU-hours training | CPU-hours evaluation | GPU cells | GPU cell-minutes |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, row in [*summary["groups"].items(), ("**all**", summary["total"])]:
        estimated = f" ({row['estimated']} estimated)" if row.get("estimated") else ""
        lines.append(
            f"| {name} | {row['cpu_cells']} | {row['cpu_hours_train']:.2f}{estimated} | "
            f"{row['cpu_hours_eval']:.2f} | {row['gpu_cells']} | {row['gpu_minutes']:.1f} |"
        )
    return [*lines, ""]


def markdown(costs: list[dict], per_method: dict) -> str:
    """Each folder's table, the per-method table when there are several folders, and the grand total."""
    lines = []
    for cost in costs:
        lines += table(cost["folder"], cost)
    if len(costs) > 1:
        lines += table("every folder, per method", per_method)
    grand = per_method["total"]["cpu_hours_train"] + per_method["total"]["cpu_hours_eval"]
    lines.append(f"All folders: **{grand:.1f} CPU-hours** (thread-hours of the cells' own calls).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", help="published benchmark folders (each with cells/*/cell.json)")
    parser.add_argument("--out", default=None, help="JSON to write (and the Markdown next to it)")
    args = parser.parse_args(argv)
    missing = [f for f in args.folders if not (Path(f) / "cells").is_dir()]
    if missing:
        parser.error(f"no cells/ folder in {', '.join(missing)}: pass published benchmark folders")
    costs = [cost_of(Path(folder)) for folder in args.folders]
    per_method = across_folders(costs)
    text = markdown(costs, per_method)
    print(text, end="")
    if args.out:
        out = Path(args.out)
        atomic_write_json(out, {"folders": costs, "per_method": per_method})
        atomic_write_text(out.with_suffix(".md"), "# What the study cost\n\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
