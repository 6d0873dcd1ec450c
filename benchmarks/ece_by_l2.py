"""How much of the L-BFGS probe's ECE is the L2 strength its selection picked, in a published study's cells.

The linear probe chooses its L2 strength by top-1 on 10 % of the training features held out (``linear`` suite);
the calibration suite measures that probe. A weaker L2 gives larger weights, so more confident logits: if the
selection's top-1 differences are small, which L2 wins is close to a coin flip, and the ECE follows it. For every
cell of each folder this groups the cells by the selected L2 and gives the ECE (median, range), the ECE after
temperature scaling (the suite's ``temperature_scaling.after``), the test top-1, and how far the selected L2's
held-out top-1 was ahead of the runner-up.

    python benchmarks/ece_by_l2.py docs/results/study-fmnist-v3 [more folders]

Writes ``ece-by-l2.json`` and ``ece-by-l2.md`` into each folder and prints the table.
"""

from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path

from probcl.core.io import atomic_write_json, atomic_write_text, read_json


def cell_row(eval_json: dict) -> dict | None:
    """The selected L2, its lead over the runner-up on the held-out features, ECE before and after temperature
    scaling and test top-1 of one cell's eval.json (None without both the linear and the calibration suite)."""
    linear, calibration = eval_json.get("linear"), eval_json.get("calibration")
    if not linear or not calibration or "ece" not in calibration:
        return None
    protocol = linear["protocol"]
    held_out = sorted(protocol.get("validation_top1", {}).values(), reverse=True)
    scaled = calibration.get("temperature_scaling", {}).get("after", {}).get("ece")
    return {
        "l2": float(protocol["l2"]),
        "lead": held_out[0] - held_out[1] if len(held_out) > 1 else None,
        "ece": float(calibration["ece"]),
        "ece_scaled": None if scaled is None else float(scaled),
        "top1": float(linear["top1"]),
    }


def _median(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def by_l2(folder: Path) -> dict:
    """{"cells": {name: row}, "groups": {l2: summary}} of a published folder (``cells/*/eval.json``)."""
    cells = {}
    for path in sorted((folder / "cells").glob("*/eval.json")):
        row = cell_row(read_json(path))
        if row is not None:
            cells[path.parent.name] = row
    groups = {}
    for l2 in sorted({row["l2"] for row in cells.values()}):
        rows = [row for row in cells.values() if row["l2"] == l2]
        groups[f"{l2:g}"] = {
            "cells": len(rows),
            "ece_median": _median([r["ece"] for r in rows]),
            "ece_min": min(r["ece"] for r in rows),
            "ece_max": max(r["ece"] for r in rows),
            "ece_scaled_median": _median([r["ece_scaled"] for r in rows]),
            "top1_median": _median([r["top1"] for r in rows]),
            "lead_median": _median([r["lead"] for r in rows]),
        }
    methods: dict[str, dict[str, list[float]]] = {}
    for name, row in cells.items():
        method = methods.setdefault(re.sub(r"-s\d+$", "", name), {})
        method.setdefault(f"{row['l2']:g}", []).append(row["ece"])
    by_method = {  # the methods whose seeds selected different strengths: the same features, another L2
        name: {l2: sorted(eces) for l2, eces in sorted(by.items(), key=lambda item: float(item[0]))}
        for name, by in sorted(methods.items())
        if len(by) > 1
    }
    return {"cells": cells, "groups": groups, "methods": by_method}


def _fmt(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def table(summary: dict) -> str:
    lines = [
        "| selected L2 | cells | ECE median (range) | ECE after temperature scaling, median | test top-1 median | "
        "held-out lead over the runner-up, median (points) |",
        "| ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for l2, g in summary["groups"].items():
        lines.append(
            f"| {l2} | {g['cells']} | {g['ece_median']:.4f} ({g['ece_min']:.4f}-{g['ece_max']:.4f}) | "
            f"{_fmt(g['ece_scaled_median'], 4)} | {_fmt(g['top1_median'], 2)} | {_fmt(g['lead_median'], 2)} |"
        )
    if summary["methods"]:
        lines += [
            "",
            "Within a method (the seeds of one method whose selections differed), the ECE of each cell by its "
            "selected L2:",
            "",
            "| method | ECE of its cells, by selected L2 |",
            "| --- | --- |",
        ]
        for name, by in summary["methods"].items():
            shown = "; ".join(f"{l2}: " + ", ".join(f"{e:.4f}" for e in eces) for l2, eces in by.items())
            lines.append(f"| {name} | {shown} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path, help="published results folders (with cells/*/eval.json)")
    args = parser.parse_args(argv)
    for folder in args.folders:
        summary = by_l2(folder)
        if not summary["cells"]:
            parser.error(f"{folder}: no cell with both a linear and a calibration result under {folder}/cells")
        text = table(summary)
        atomic_write_json(folder / "ece-by-l2.json", summary)
        atomic_write_text(folder / "ece-by-l2.md", f"# The probe's ECE by its selected L2: {folder.name}\n\n{text}")
        print(f"{folder}\n{text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
