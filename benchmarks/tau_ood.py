"""OOD detection of trained runs: TaU scores next to the kNN-distance and max-softmax baselines.

    python benchmarks/tau_ood.py runs/simclr-fmnist runs/tau-simclr-fmnist runs/tau-posthoc-fmnist \
        --ood digits noise --out benchmarks/results/tau_ood.json

In-distribution: the test split of each run's training dataset. Out-of-distribution: any dataset spec
(conformed to the run's input), or ``noise``: Gaussian-noise images (pixel mean 0.5, std 0.25, clipped).
Scores, all oriented higher = more OOD:
- TaU ``neg_u`` (-u, the paper's pre-sigmoid score) and ``neg_u_squared`` (-u^2, the authors' code),
  for methods with a TaU head;
- ``knn``: mean Euclidean distance to the k = 10 nearest L2-normalized training projections;
- ``msp``: minus the max softmax probability of an offline linear probe on backbone features
  (multinomial logistic regression, L-BFGS; its test top-1 is reported as ``linear_top1``).
Reported: AUROC (sklearn) and FPR95 (share of OOD accepted when 95 % of in-distribution is accepted).
"""
from __future__ import annotations

import argparse
import json

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from probcl.data.datasets import TensorImages
from probcl.eval.outlier import knn_distance, threshold_at_tpr
from probcl.io import atomic_write_json
from probcl.scoring import ScoreOptions, Scorer


def noise_images(n: int, channels: int, size: int, seed: int = 0) -> TensorImages:
    g = torch.Generator().manual_seed(seed)
    x = (0.5 + 0.25 * torch.randn(n, channels, size, size, generator=g)).clamp(0, 1)
    return TensorImages((x * 255).round().to(torch.uint8), None, "noise")


def scores_of(scorer: Scorer, data) -> dict[str, torch.Tensor]:
    out = scorer.collect(data, f"scores: {data.name}")
    scores = {"knn": knn_distance(scorer.reference, out["projection"], scorer.options.k),
              "msp": -scorer.probe(out["features"]).softmax(1).max(1).values}
    if scorer.has_uncertainty and hasattr(scorer.model, "raw_u"):
        with torch.no_grad():
                u = torch.cat([scorer.model.raw_u(images.to(scorer.device)).cpu()
                           for images, _, _, _ in scorer.batches(data, f"u: {data.name}") if images is not None])
        scores.update(neg_u=-u, neg_u_squared=-u.square())
    return scores


def evaluate(run: str, ood_specs: list[str], max_train: int | None, noise_count: int) -> dict:
    scorer = Scorer(run, ScoreOptions(probe="offline", max_train=max_train, uncertainty_score=None))
    scorer.fit_reference()
    info = scorer.model.data_info
    inside = scores_of(scorer, scorer.dataset(None, "test"))
    result = {"method": scorer.model.cfg.method, "linear_top1": scorer.protocol["probe_test_top1"], "ood": {}}
    for spec in ood_specs:
        data = noise_images(noise_count, info.channels, info.image_size) if spec == "noise" else scorer.dataset(spec, "all")
        outside = scores_of(scorer, data)
        result["ood"][spec] = {}
        for name, in_scores in inside.items():
            labels = np.r_[np.zeros(len(in_scores)), np.ones(len(outside[name]))]
            values = torch.cat([in_scores, outside[name]]).numpy()
            threshold = threshold_at_tpr(in_scores, 0.95)
            result["ood"][spec][name] = {"auroc": float(roc_auc_score(labels, values)),
                                         "fpr95": float((outside[name] <= threshold).float().mean())}
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+")
    p.add_argument("--ood", nargs="+", default=["digits", "noise"])
    p.add_argument("--max-train", type=int, default=None, help="training images for the kNN reference and probe")
    p.add_argument("--noise-count", type=int, default=2000)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    results = {run: evaluate(run, args.ood, args.max_train, args.noise_count) for run in args.runs}
    print(json.dumps(results, indent=2))
    if args.out:
        atomic_write_json(args.out, results)


if __name__ == "__main__":
    main()
