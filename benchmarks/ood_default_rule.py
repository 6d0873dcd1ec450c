"""Apply the rule of docs/ood-default-rule.md to the saved per-image scores (``ood-scores.npz``) of sets of cells.

The candidate is chosen on the development cells (``--develop``; or named with ``--candidate``) and judged on the
confirmation cells (``--confirm``): per OOD set and cell, its AUROC against the best single registered score and
Mahalanobis, and the ID acceptance, with how many cells meet the target. Each cell is a run or benchmark-cell
folder holding ``ood-scores.npz`` (the ``ood`` suite writes it).

    python benchmarks/ood_default_rule.py --develop runs/study-v3/cells/*-s0 \\
        --confirm runs/study-v3/cells/*-s1 runs/study-v3/cells/*-s2 --out docs/results/ood-default/confirmation.json

Without ``--confirm`` it reports the choice alone (the development ranking), before any confirmation cell exists:

    python benchmarks/ood_default_rule.py --develop runs/study-v3/cells/*-s0 \\
        --out docs/results/ood-default/development.json

Writes the JSON and a Markdown table next to it (same name, ``.md``), and prints the table. ``--compare`` sets the
confirmations of several candidates on the same cells side by side (per OOD set: cells meeting the target, the worst
shortfall, the mean AUROC and, on near sets, the cells at or above Mahalanobis alone):

    python benchmarks/ood_default_rule.py --compare docs/results/ood-default/confirmation.json \
        docs/results/ood-default/confirmation-current.json --out docs/results/ood-default/side-by-side.md
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `common`, whether run as a script or imported
from common import write_outputs  # noqa: E402

from probcl.core.io import atomic_write_text  # noqa: E402
from probcl.errors import ConfigError  # noqa: E402
from probcl.eval.ood_scores.per_image import load_scores  # noqa: E402
from probcl.eval.ood_scores.selection import CANDIDATES, TARGET, choose, judge_cell, summarise  # noqa: E402


def cell_labels(folders: list[str]) -> list[str]:
    """Each folder's cell name; names that two folders share (``simclr-s1`` of two studies) are prefixed with the
    folder that holds the cells (``study-fmnist-v3-split2/simclr-s1``). One ConfigError for a folder given twice."""
    paths = [Path(folder) for folder in folders]
    names = [path.name for path in paths]
    labels = [
        f"{path.parent.parent.name if path.parent.name == 'cells' else path.parent.name}/{path.name}"
        if names.count(path.name) > 1
        else path.name
        for path in paths
    ]
    if len(set(labels)) < len(labels):
        raise ConfigError(f"a cell folder is named twice: {sorted({x for x in labels if labels.count(x) > 1})}")
    return labels


def load_cells(folders: list[str]) -> dict:
    """``{cell label: per-image scores}`` of each folder (:func:`cell_labels`)."""
    return {label: load_scores(folder) for label, folder in zip(cell_labels(folders), folders, strict=True)}


def apply_rule(develop: list[str], confirm: list[str], candidate: str | None, near: Sequence[str] = ()) -> dict:
    """The chosen candidate (on ``develop``, unless ``candidate`` names it) and its verdicts on ``confirm`` (none:
    the choice alone); ``near`` names near-OOD sets besides held-out classes of the training dataset."""
    if candidate is None and not develop:
        raise ConfigError("name the development cells (--develop) or the candidate (--candidate)")
    development = choose(load_cells(develop), near=near) if develop else None
    chosen = candidate or (development or {})["chosen"]
    if chosen not in CANDIDATES:
        raise ConfigError(f"unknown candidate {chosen!r}; valid: {', '.join(CANDIDATES)}")
    result = {
        "candidate": chosen,
        "combination": list(CANDIDATES[chosen]),
        "target": vars(TARGET),
        "development": {"cells": cell_labels(develop), **(development or {})},
    }
    if not confirm:  # the choice alone, before any confirmation cell exists
        return result
    cells = load_cells(confirm)
    verdicts = [judge_cell(cell, scores, CANDIDATES[chosen], near=near) for cell, scores in cells.items()]
    return {
        **result,
        "confirmation": {
            "cells": {
                v.cell: {"sets": v.sets, "acceptance": v.acceptance, "acceptance_met": v.acceptance_met}
                for v in verdicts
            },
            "summary": summarise(verdicts),
        },
    }


def markdown(result: dict) -> str:
    """The confirmation table: per cell and OOD set, the default's AUROC, the best single score's and
    Mahalanobis's; then per set how many cells meet the target."""
    lines = []
    if result["development"].get("ranking"):
        lines += [
            f"Development cells: {', '.join(result['development']['cells'])}. Candidates in the rule's order "
            "(target met on development; (set, cell) pairs and acceptance cells meeting it; worst shortfall):",
            "",
            "| candidate | met | hits | worst shortfall |",
            "| --- | :---: | ---: | ---: |",
        ]
        for entry in result["development"]["ranking"]:
            summary = entry["summary"]
            hits = sum(e["met"] for e in summary["sets"].values()) + summary["acceptance"]["met"]
            worst = max((e["worst_shortfall"] for e in summary["sets"].values()), default=0.0)
            lines.append(f"| {entry['candidate']} | {'yes' if summary['met'] else 'no'} | {hits} | {worst:.3f} |")
        lines.append("")
    if "confirmation" not in result:
        return "\n".join(
            [
                *lines,
                f"Chosen on the development cells: **{result['candidate']}** "
                f"({', '.join(result['combination'])}); no confirmation cell judged yet.",
                "",
            ]
        )
    confirmation = result["confirmation"]
    lines += [
        f"Default candidate: **{result['candidate']}** ({', '.join(result['combination'])}); "
        f"target met: **{'yes' if confirmation['summary']['met'] else 'no'}**.",
        "",
        "| cell | OOD set | default AUROC | best single (AUROC) | Mahalanobis | met |",
        "| --- | --- | ---: | --- | ---: | :---: |",
    ]
    for cell, verdict in confirmation["cells"].items():
        for name, row in verdict["sets"].items():
            maha = "—" if row["mahalanobis"] is None else f"{row['mahalanobis']:.3f}"
            label = f"{name} (near)" if row["near"] else name
            lines.append(
                f"| {cell} | {label} | {row['auroc']:.3f} | {row['best_single']} ({row['best_auroc']:.3f}) | "
                f"{maha} | {'yes' if row['met'] else 'no'} |"
            )
        lines.append(
            f"| {cell} | ID accepted | {100 * verdict['acceptance']:.1f} % | | | "
            f"{'yes' if verdict['acceptance_met'] else 'no'} |"
        )
    lines += ["", "| OOD set | cells meeting the target | share | worst shortfall |", "| --- | ---: | ---: | ---: |"]
    for name, entry in confirmation["summary"]["sets"].items():
        lines.append(
            f"| {name} | {entry['met']} / {entry['cells']} | {entry['share']:.0%} | {entry['worst_shortfall']:.3f} |"
        )
    acceptance = confirmation["summary"]["acceptance"]
    lines.append(
        f"| ID acceptance within 1 point | {acceptance['met']} / {acceptance['cells']} | {acceptance['share']:.0%} | |"
    )
    return "\n".join(lines) + "\n"


def side_by_side(results: Sequence[dict]) -> str:
    """Markdown: the confirmations ``results`` (one candidate each, the same cells) per OOD set and candidate."""
    cells = [set(r["confirmation"]["cells"]) for r in results]
    if any(c != cells[0] for c in cells):
        raise ConfigError("--compare needs confirmations of the same cells")
    names = [r["candidate"] for r in results]
    lines = [
        "| OOD set | "
        + " | ".join(f"`{n}`: met (worst shortfall); mean AUROC" for n in names)
        + " | Mahalanobis alone: mean AUROC |",
        "| --- |" + " --- |" * (len(names) + 1),
    ]
    for set_name in results[0]["confirmation"]["summary"]["sets"]:
        row = [set_name]
        for r in results:
            entry = r["confirmation"]["summary"]["sets"][set_name]
            rows = [v["sets"][set_name] for v in r["confirmation"]["cells"].values() if set_name in v["sets"]]
            mean = sum(x["auroc"] for x in rows) / len(rows)
            text = f"{entry['met']} / {entry['cells']} ({entry['worst_shortfall']:.3f}); {mean:.3f}"
            if entry["near"]:
                text += f"; >= Mahalanobis in {sum(x['auroc'] >= x['mahalanobis'] for x in rows)}"
            row.append(text)
        cells_of_set = [
            v["sets"][set_name] for v in results[0]["confirmation"]["cells"].values() if set_name in v["sets"]
        ]
        alone = [x["mahalanobis"] for x in cells_of_set if x["mahalanobis"] is not None]
        row.append(f"{sum(alone) / len(alone):.3f}" if alone else "—")
        lines.append("| " + " | ".join(row) + " |")
    accepted = ["ID acceptance within 1 point of 95 %"]
    for r in results:
        a = r["confirmation"]["summary"]["acceptance"]
        accepted.append(f"{a['met']} / {a['cells']}")
    accepted.append("")
    lines.append("| " + " | ".join(accepted) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--develop", nargs="*", default=[], help="development cell folders (choose the candidate)")
    parser.add_argument(
        "--confirm", nargs="*", default=[], help="confirmation cell folders (judge it); none: the choice alone"
    )
    parser.add_argument("--candidate", default=None, help=f"skip the choice: one of {', '.join(CANDIDATES)}")
    parser.add_argument("--near", nargs="*", default=[], help="near-OOD sets besides held-out training classes")
    parser.add_argument("--compare", nargs="*", default=[], help="confirmation JSON files to set side by side")
    parser.add_argument("--out", default="docs/results/ood-default/confirmation.json")
    args = parser.parse_args()
    if args.compare:
        table = side_by_side([json.loads(Path(f).read_text()) for f in args.compare])
        atomic_write_text(Path(args.out), table)
        print(table)
        return
    result = apply_rule(args.develop, args.confirm, args.candidate, args.near)
    write_outputs(Path(args.out), result, markdown(result))


if __name__ == "__main__":
    main()
