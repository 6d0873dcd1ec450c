"""The ECE floor of a perfectly calibrated probe at a published study's test size, per method and probe.

ECE is biased upward on a finite test set: a probe whose confidence equals its accuracy in expectation still shows
an ECE of about sqrt(2 / pi) * sqrt(c (1 - c) / n) per bin. Differences between methods near that floor say little
about their features. For every cell of a published results folder this reads the calibration suite's reliability
bins (eval.json keeps no probabilities) and simulates the floor from them
(:func:`probcl.eval.calibration.ece_floor_from_bins`: 2,000 draws), then gives per method the mean observed ECE and
the mean floor, for the L-BFGS probe and each other probe the suite ran (``sgd``, ``sgd-heldout``).

    python benchmarks/ece_floor.py docs/results/study-fmnist-v2 docs/results/study-fmnist-long

Writes ``ece-floor.json`` and ``ece-floor.md`` into each folder and prints the table.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from probcl.core.io import atomic_write_json, atomic_write_text, read_json
from probcl.eval.calibration import ece_floor_from_bins

RESAMPLES = 2000


def probe_results(calibration: dict) -> dict[str, dict]:
    """{probe: its calibration result}: the suite's own (the first probe's) and those under a probe's name."""
    first = calibration.get("protocol", {}).get("probe", "offline linear probe of the `linear` suite: lbfgs")
    name = first.split(": ", 1)[-1].split(";")[0].strip()
    probes = {name: calibration}
    probes.update({k: v for k, v in calibration.items() if isinstance(v, dict) and isinstance(v.get("bins"), dict)})
    return probes


def folder_floors(folder: Path) -> dict:
    """{group: {probe: {ece, floor, floor_std, cells}}} of a published results folder's cells."""
    results = read_json(folder / "results.json")
    by_group: dict[str, dict[str, list[tuple[float, dict]]]] = {}
    for cell in results["cells"]:
        calibration = read_json(folder / cell["run_dir"] / "eval.json", {}).get("calibration")
        if not calibration or cell["error"]:
            continue
        for probe, result in probe_results(calibration).items():
            floor = ece_floor_from_bins(result["bins"], RESAMPLES, seed=cell["seed"])
            by_group.setdefault(cell["group"], {}).setdefault(probe, []).append((result["ece"], floor))
    return {
        group: {
            probe: {
                "ece": statistics.fmean(e for e, _ in rows),
                "floor": statistics.fmean(f["mean"] for _, f in rows),
                "floor_std": statistics.fmean(f["std"] for _, f in rows),
                "cells": len(rows),
            }
            for probe, rows in probes.items()
        }
        for group, probes in by_group.items()
    }


def table(floors: dict) -> str:
    probes = list(dict.fromkeys(p for g in floors.values() for p in g))
    head = "| method | " + " | ".join(f"{p} ECE | {p} floor (± std)" for p in probes) + " |"
    rows = [head, "|---" + "|---:" * (2 * len(probes)) + "|"]
    for group, by_probe in floors.items():
        cells = []
        for p in probes:
            r = by_probe.get(p)
            cells += [f"{r['ece']:.4f}", f"{r['floor']:.4f} ± {r['floor_std']:.4f}"] if r else ["—", "—"]
        rows.append(f"| {group} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path, help="published results folders (with results.json)")
    args = parser.parse_args()
    for folder in args.folders:
        floors = folder_floors(folder)
        atomic_write_json(folder / "ece-floor.json", {"resamples": RESAMPLES, "groups": floors})
        text = table(floors)
        atomic_write_text(folder / "ece-floor.md", f"# ECE floor of a calibrated probe: {folder.name}\n\n{text}")
        print(f"{folder}\n{text}")


if __name__ == "__main__":
    main()
