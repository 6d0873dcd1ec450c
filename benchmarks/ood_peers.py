"""pytorch-ood's detectors and probcl's OOD scores side by side, on identical features of a named run.

The features of the run's training split (``--max-train`` seeded subset) fit every detector; the linear probe of
the ``linear`` suite (L-BFGS on the same features) is the head of the head-based ones (energy, MSP, max-logit,
ViM). The ID test split is halved by a seeded permutation as in the ``ood`` suite: probcl's ID-fitted scores
calibrate their tails (for ``combined``) on one half, and every detector is measured on the other half against
each OOD set: AUROC, and FPR95 both ways: OOD accepted when 95 % of ID images are accepted (probcl's ``fpr95``,
the OOD literature's FPR@95TPR with ID positive) and ID images flagged when 95 % of the OOD set is flagged (OOD
positive, pytorch-ood's ``FPR95TPR``). The same metric code scores every detector.

    python benchmarks/ood_peers.py runs/study/cells/simclr-s0 --near fashion-mnist:classes=8-9 \\
        --out docs/results/ood-peers/simclr-s0.json

Writes the JSON and a Markdown table next to it (same name, ``.md``), and prints the table.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from common import diagnose_each, ood_sets, per_run_parser
from pytorch_ood.detector import KNN, RMD, EnergyBased, Mahalanobis, MaxLogit, MaxSoftmax, ViM

from probcl.data.ood_sets import GENERATED
from probcl.eval import ModelOnData
from probcl.eval.id_reference import ReferenceOptions, fit_reference
from probcl.eval.inputs import calibration_halves
from probcl.eval.ood import auroc, fpr_at_tpr
from probcl.eval.ood_scores.calibration import COMBINED
from probcl.eval.ood_scores.entries import KNN_KS
from probcl.eval.ood_scores.head import LinearHead, vim_principal_dim

FAR = ["digits", *GENERATED]


def peer_detectors(train: torch.Tensor, labels: torch.Tensor, head: LinearHead) -> dict:
    """pytorch-ood 0.4.0's detectors fitted on the training features, as feature -> score functions."""
    z, y = train.float(), labels.long()
    w, b = head.weight.float(), head.bias.float()

    def logits(f: torch.Tensor) -> torch.Tensor:
        return f.float() @ w.T + b

    detectors = {
        "Mahalanobis": Mahalanobis(None).fit_features(z, y).predict_features,
        "RMD": RMD(None).fit_features(z, y).predict_features,
        "ViM": ViM(None, d=vim_principal_dim(z.shape[1]), w=w, b=b).fit_features(z, y).predict_features,
        "EnergyBased": lambda f: EnergyBased.score(logits(f)),
        "MaxSoftmax": lambda f: MaxSoftmax.score(logits(f)),
        "MaxLogit": lambda f: MaxLogit.score(logits(f)),
    }
    for k in KNN_KS:
        for normalize in (True, False):
            name = f"KNN k={k}" + ("" if normalize else " (not normalised)")
            detectors[name] = KNN(None, k=k, normalize=normalize).fit_features(z, y).predict_features
    return detectors


def metrics(id_scores: torch.Tensor, ood_scores: torch.Tensor) -> dict[str, float]:
    """AUROC and FPR95 both ways (module docstring)."""
    return {
        "auroc": auroc(id_scores, ood_scores),
        "fpr95_id": fpr_at_tpr(id_scores, ood_scores),  # OOD accepted at 95 % of ID accepted
        "fpr95_ood": fpr_at_tpr(-ood_scores.double(), -id_scores.double()),  # ID flagged at 95 % of OOD flagged
    }


def peers(run: str, near: list[str], far: list[str], max_train: int, max_images: int, seed: int) -> dict:
    """Every detector's metrics per OOD set, on the run's features."""
    started = time.time()
    ctx = ModelOnData(Path(run), max_train=max_train, batch_size=512, seed=seed)
    test = ctx.dataset(None, "test")
    calibration, held_out = (test.subset(idx) for idx in calibration_halves(len(test), seed))
    _, probe = ctx.linear_probe()
    head = LinearHead.of_probe(probe)
    reference, _ = fit_reference(ctx, calibration, ReferenceOptions(seed=seed), head)
    held_images = held_out.seeded_subset(max_images, seed).to_memory()
    sets = ood_sets(ctx, near + far, held_images, max_images, seed)

    def scored(data) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        out = reference.collect(ctx, data, f"{Path(run).name}: {data.name}")
        scores = {f"probcl {name}": out[name] for name in reference.score_names}
        scores[f"probcl {COMBINED}"] = reference.decision(out)["ood_score"]
        return out["features"], scores

    train, labels = ctx.features("train")
    detectors = peer_detectors(train, labels, head)
    id_features, id_scores = scored(held_images)
    id_scores.update({f"pytorch-ood {n}": d(id_features).double().cpu() for n, d in detectors.items()})
    cfg = ctx.model.cfg
    result: dict = {
        "run": run,
        "method": ctx.method,
        "config": {
            "dataset": cfg.data.dataset,
            "train_subset": cfg.data.train_subset,
            "epochs": cfg.train.epochs,
            "batch_size": cfg.train.batch_size,
            "seed": cfg.train.seed,
            "backbone": f"{cfg.model.backbone} width {cfg.model.width} pool {cfg.model.pool}",
        },
        "feature_dim": int(train.shape[1]),
        "fit_images": len(train),
        "id_images": len(held_images),
        "probe": "the linear suite's L-BFGS probe on the same training features (head of energy, MSP, max-logit, ViM)",
        "sets": {},
    }
    for spec, data in sets.items():
        features, scores = scored(data)
        scores.update({f"pytorch-ood {n}": d(features).double().cpu() for n, d in detectors.items()})
        result["sets"][spec] = {
            "images": len(data),
            "near": spec in near,
            "detectors": {name: metrics(id_scores[name], scores[name]) for name in scores},
        }
    result["seconds"] = round(time.time() - started, 1)
    return result


def markdown(results: list[dict]) -> str:
    """One table per run: rows = detectors, columns = AUROC / FPR95 (ID 95 %) / FPR95 (OOD 95 %) per OOD set."""
    lines = []
    for r in results:
        sets = list(r["sets"])
        names = list(next(iter(r["sets"].values()))["detectors"])
        c = r["config"]
        lines += [
            f"### {r['method']} ({r['run']})",
            "",
            f"Trained on {c['dataset']} ({r['fit_images']} training images fitted on, {r['feature_dim']}-d features), "
            f"{c['epochs']} epochs, batch {c['batch_size']}, seed {c['seed']}, {c['backbone']}; "
            f"{r['id_images']} held-out ID images. Each cell: AUROC / FPR95 at 95 % ID accepted / FPR95 at 95 % OOD "
            "flagged.",
            "",
            "| detector | " + " | ".join(f"{s} (near)" if r["sets"][s]["near"] else s for s in sets) + " |",
            "| --- | " + " | ".join("---:" for _ in sets) + " |",
        ]
        for name in names:
            row = [r["sets"][s]["detectors"][name] for s in sets]
            cells = [f"{m['auroc']:.3f} / {m['fpr95_id']:.3f} / {m['fpr95_ood']:.3f}" for m in row]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    args = per_run_parser(__doc__ or "", FAR, "docs/results/ood-peers/peers.json").parse_args()
    diagnose_each(
        args.runs,
        Path(args.out),
        lambda run: peers(run, args.near, args.far, args.max_train, args.max_images, args.seed),
        markdown,
    )


if __name__ == "__main__":
    main()
