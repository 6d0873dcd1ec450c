"""What TaU's learned temperature tracks, for trained TaU runs: the check behind the study's TaU verdicts.

TaU's premise (Sec. 2) is that a training input whose views are hard to match gets a high temperature, so
the temperature (pre-sigmoid u, low u = high temperature) should flag the inputs a model gets wrong. Per run:

- ID errors: AUROC of the temperature score ``neg_u`` = -u at ranking the offline linear probe's misclassified
  test images above its correct ones (0.5 = the temperature knows nothing about difficulty);
- per OOD set: mean u, mean backbone-feature L2 norm, and the AUROC of ``neg_u`` against the ID test images;
- Spearman correlation of u with the feature norm over all images: a linear temperature output extrapolates
  along the features, so inputs unlike any training image can land far on either side of the training range.

    python benchmarks/tau_temperature.py runs/study-fmnist/cells/tau-simclr-s{0,1} \\
        runs/study-fmnist/cells/tau-posthoc-s0 --near fashion-mnist:classes=8-9 \\
        --out docs/results/tau-temperature/study.json

Writes the JSON and a Markdown table next to it (same name, ``.md``), and prints the table. Resumable: runs
already in the output file are kept.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from common import diagnose_each, ood_sets, per_run_parser
from scipy import stats

from probcl.eval import ModelOnData
from probcl.eval.ood import auroc

SETS = ["digits", "noise:gaussian", "noise:uniform", "inverted", "blank"]


def diagnose(run: str, near: list[str], far: list[str], max_train: int, max_images: int, seed: int) -> dict:
    """The temperature's ranking of ID errors and of each OOD set, and its relation to the feature norm."""
    started = time.time()
    ctx = ModelOnData(Path(run), max_train=max_train, batch_size=512, seed=seed)
    test = ctx.dataset(None, "test")
    id_out = ctx.collect(test, f"{Path(run).name}: ID test", uncertainty_score="neg_u")
    _, probe = ctx.linear_probe()
    wrong = probe.logits(id_out["features"]).argmax(1) != id_out["labels"]
    id_images = test.seeded_subset(max_images, seed).to_memory()
    sets = ood_sets(ctx, near + far, id_images, max_images, seed)

    def summary(out: dict[str, torch.Tensor]) -> dict[str, float]:
        return {
            "mean_u": float(-out["uncertainty"].mean()),
            "mean_feature_norm": float(out["features"].norm(dim=1).mean()),
        }

    result: dict = {
        "run": run,
        "method": ctx.method,
        "id": {
            **summary(id_out),
            "images": len(wrong),
            "probe_error_rate": float(wrong.float().mean()),
            "errors_auroc": auroc(id_out["uncertainty"][~wrong], id_out["uncertainty"][wrong]),
        },
        "sets": {},
    }
    all_u, all_norm = [-id_out["uncertainty"]], [id_out["features"].norm(dim=1)]
    for spec, data in sets.items():
        out = ctx.collect(data, f"{Path(run).name}: {spec}", uncertainty_score="neg_u")
        result["sets"][spec] = {
            **summary(out),
            "near": spec in near,
            "auroc": auroc(id_out["uncertainty"], out["uncertainty"]),
        }
        all_u.append(-out["uncertainty"])
        all_norm.append(out["features"].norm(dim=1))
    rho = stats.spearmanr(torch.cat(all_u).numpy(), torch.cat(all_norm).numpy())
    result["spearman_u_feature_norm"] = float(rho.statistic)
    result["seconds"] = round(time.time() - started, 1)
    return result


def markdown(results: list[dict]) -> str:
    """One table per run: ID (with the error ranking) and every OOD set."""
    lines = []
    for r in results:
        i = r["id"]
        lines += [
            f"### {r['method']} ({r['run']})",
            "",
            f"ID test: {i['images']} images, probe error {100 * i['probe_error_rate']:.1f} %; temperature AUROC "
            f"ranking the probe's errors above its correct images: **{i['errors_auroc']:.3f}**. Spearman(u, feature "
            f"norm) over all images: {r['spearman_u_feature_norm']:+.2f}.",
            "",
            "| images | mean u | mean feature norm | AUROC of -u vs ID |",
            "| --- | ---: | ---: | ---: |",
            f"| ID test | {i['mean_u']:+.3f} | {i['mean_feature_norm']:.2f} | |",
        ]
        for spec, s in r["sets"].items():
            label = f"{spec} (near)" if s["near"] else spec
            lines.append(f"| {label} | {s['mean_u']:+.3f} | {s['mean_feature_norm']:.2f} | {s['auroc']:.3f} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    args = per_run_parser(__doc__ or "", SETS, "docs/results/tau-temperature/tau_temperature.json").parse_args()
    diagnose_each(
        args.runs,
        Path(args.out),
        lambda run: diagnose(run, args.near, args.far, args.max_train, args.max_images, args.seed),
        markdown,
    )


if __name__ == "__main__":
    main()
