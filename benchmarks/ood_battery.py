"""The OOD battery x score table of `probcl score`'s ID-fitted scores, for one or more runs.

For each run the test split is cut by a seeded permutation into a calibration half (what `probcl score`
fits its tails and thresholds on) and a held-out half that no fitted quantity sees; the generated OOD sets
are made from held-out images, the near-OOD set (e.g. ``fashion-mnist:classes=8-9`` for a run pretrained on
classes 0-7) is read as a dataset. Every score, and the default ``combined`` decision, gets AUROC and FPR95
against the held-out ID images, plus the share of each set flagged at the default threshold (and the share of
held-out ID images accepted, which the threshold promises to be >= 95 % in expectation).

    python benchmarks/ood_battery.py runs/study-fmnist/cells/{simclr,tau-simclr,c-simclr,ebclr}-s0 \\
        --near fashion-mnist:classes=8-9 --out docs/results/ood-battery/study-s0.json

``--combination knn10 feature_norm mahalanobis input_stats`` judges another decision (e.g. an earlier default).
Writes the JSON and a Markdown table next to it (same name, ``.md``), and prints the table.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from common import diagnose_each, ood_sets, per_run_parser

from probcl.data.ood_sets import GENERATED
from probcl.eval import ModelOnData
from probcl.eval.id_reference import ReferenceOptions, fit_reference
from probcl.eval.inputs import calibration_halves
from probcl.eval.ood import ood_metrics
from probcl.eval.ood_scores.calibration import COMBINED

FAR = ["digits", *GENERATED]


def battery(
    run: str,
    near: list[str],
    far: list[str],
    max_train: int,
    max_images: int,
    seed: int,
    combination: list[str] | None = None,
) -> dict:
    """Per set: every score's AUROC / FPR95 against held-out ID images and the share flagged by default."""
    started = time.time()
    ctx = ModelOnData(Path(run), max_train=max_train, batch_size=512, seed=seed)
    test = ctx.dataset(None, "test")
    calibration, held_out = (test.subset(idx) for idx in calibration_halves(len(test), seed))
    reference, _ = fit_reference(ctx, calibration, ReferenceOptions(seed=seed, combination=combination))
    held_images = held_out.seeded_subset(max_images, seed).to_memory()
    sets = ood_sets(ctx, near + far, held_images, max_images, seed)

    def scored(data) -> dict[str, torch.Tensor]:
        out = reference.collect(ctx, data, f"{Path(run).name}: {data.name}")
        scores = {name: out[name] for name in reference.score_names}
        decision = reference.decision(scores)
        scores[COMBINED] = decision["ood_score"]
        scores["flag"] = reference.flags(decision)[0].float()
        return scores

    id_scores = scored(held_images)
    result: dict = {
        "run": run,
        "method": ctx.method,
        "combination": reference.combination,
        "protocol": reference.protocol(),
        "id_images": len(held_images),
        "id_accepted": 1.0 - float(id_scores["flag"].mean()),
        "sets": {},
    }
    for spec, data in sets.items():
        ood = scored(data)
        result["sets"][spec] = {
            "images": len(data),
            "near": spec in near,
            "flagged": float(ood["flag"].mean()),
            "scores": {name: ood_metrics(id_scores[name], ood[name]) for name in [*reference.score_names, COMBINED]},
        }
    result["seconds"] = round(time.time() - started, 1)
    return result


def markdown(results: list[dict]) -> str:
    """One table per run: rows = OOD sets, columns = AUROC / FPR95 per score, then the share flagged."""
    lines = []
    for r in results:
        names = [*next(iter(r["sets"].values()))["scores"]]
        lines += [
            f"### {r['method']} ({r['run']})",
            "",
            f"Held-out ID images accepted at the default threshold: {100 * r['id_accepted']:.1f} % "
            f"({r['id_images']} images); combination: {', '.join(r['combination'])}.",
            "",
            "| OOD set | " + " | ".join(names) + " | flagged |",
            "| --- | " + " | ".join("---:" for _ in names) + " | ---: |",
        ]
        for spec, s in r["sets"].items():
            cells = [f"{s['scores'][n]['auroc']:.3f} / {s['scores'][n]['fpr95']:.3f}" for n in names]
            label = f"{spec} (near)" if s["near"] else spec
            lines.append(f"| {label} | " + " | ".join(cells) + f" | {100 * s['flagged']:.1f} % |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = per_run_parser(__doc__ or "", FAR, "docs/results/ood-battery/battery.json")
    parser.add_argument("--combination", nargs="*", default=None, help="the decision's scores (default: the default)")
    args = parser.parse_args()
    diagnose_each(
        args.runs,
        Path(args.out),
        lambda run: battery(run, args.near, args.far, args.max_train, args.max_images, args.seed, args.combination),
        markdown,
    )


if __name__ == "__main__":
    main()
