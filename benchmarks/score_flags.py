"""`probcl score`'s default decision against `--score mahalanobis` on folders of held-out Fashion-MNIST classes
(issue 42: the default must flag at least as many held-out-class images at the same ID acceptance).

For each class split it pretrains the main job's recipe (`fashion-mnist/simclr`, the preset `./run.sh` trains) on the
other classes, writes the test images of the held-out classes to a folder of PNG files, and calls the CLI as a user
would, twice per decision (the held-out-class folder; the training classes' test split):

    probcl score RUN --dataset folder:HELD_OUT --max-calibration 4000 [--score mahalanobis]
    probcl score RUN --dataset fashion-mnist:classes=KEPT --split test --max-calibration 4000 [--score mahalanobis]

The thresholds are calibrated on a seeded 4,000 of the training classes' test images; the other test images of
those classes are the held-out ID images on which the acceptance is measured. Reported per decision: flagged
held-out-class images at its own calibrated threshold and the ID acceptance it reached, the flags at a matched
acceptance (each decision's threshold set to accept exactly the share of held-out ID images that the default
accepted), and AUROC.

    python benchmarks/score_flags.py --out docs/results/ood-default/score-flags.json

Runs, folders and the CLI's CSV files go under ``--work`` (default ``runs/score-flags``); a finished run and an
existing CSV are reused, so a re-run resumes. Writes JSON and a Markdown table next to it.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import timed_pretrain, write_outputs  # noqa: E402

from probcl.data.loaders import load_dataset  # noqa: E402

SPLITS = {"8-9": "0-7", "2,6": "0,1,3,4,5,7,8,9"}  # held-out classes -> training classes
CALIBRATION = 4000
DECISIONS = {"default (combined)": [], "mahalanobis": ["--score", "mahalanobis"]}


def held_out_folder(classes: str, folder: Path) -> int:
    """The test images of ``classes`` as PNG files in ``folder`` (written once); their number."""
    data = load_dataset(f"fashion-mnist:classes={classes}", "test")
    images, _, _ = data.batch(range(len(data)))
    if not (folder / "done").exists():
        folder.mkdir(parents=True, exist_ok=True)
        for i, image in enumerate(images):
            Image.fromarray(image[0].numpy()).save(folder / f"{i:05d}.png")
        (folder / "done").write_text("")
    return len(images)


def score(run: Path, dataset: str, out: Path, extra: list[str]) -> list[dict[str, str]]:
    """Rows of ``probcl score RUN --dataset DATASET`` (the CLI, in a subprocess), reused when ``out`` exists."""
    if out.exists():
        with open(out, newline="") as fh:
            return list(csv.DictReader(fh))
    cmd = [sys.executable, "-m", "probcl.cli", "score", str(run), "--dataset", dataset, "--out", str(out)]
    subprocess.run([*cmd, "--max-calibration", str(CALIBRATION), *extra], check=True)
    with open(out, newline="") as fh:
        return list(csv.DictReader(fh))


def decide(id_rows: list[dict], ood_rows: list[dict], column: str) -> dict:
    """Acceptance and flags of one decision at its calibrated threshold, and its scores for matched acceptance."""
    id_scores = np.array([float(r[column]) for r in id_rows])
    ood_scores = np.array([float(r[column]) for r in ood_rows])
    labels = np.r_[np.zeros(len(id_scores)), np.ones(len(ood_scores))]
    return {
        "id_accepted": float(np.mean([r["ood"] == "False" for r in id_rows])),
        "flagged": int(sum(r["ood"] == "True" for r in ood_rows)),
        "auroc": float(roc_auc_score(labels, np.r_[id_scores, ood_scores])),
        "_id": id_scores,
        "_ood": ood_scores,
    }


def flags_at_acceptance(entry: dict, acceptance: float) -> int:
    """Held-out-class images flagged when the threshold accepts ``acceptance`` of the held-out ID images."""
    threshold = np.quantile(entry["_id"], acceptance, method="higher")
    return int((entry["_ood"] > threshold).sum())


def one_split(held_out: str, kept: str, work: Path) -> dict:
    run = work / f"simclr-classes-{kept.replace(',', '')}"
    _, seconds = timed_pretrain("fashion-mnist/simclr", {"data.dataset": f"fashion-mnist:classes={kept}"}, run)
    folder = work / f"held-out-{held_out.replace(',', '')}"
    n_ood = held_out_folder(held_out, folder)
    calibration = set(load_dataset(f"fashion-mnist:classes={kept}", "test").seeded_indices(CALIBRATION, 0).tolist())
    result: dict = {"run": str(run), "held_out": held_out, "kept": kept, "held_out_images": n_ood}
    decisions = {}
    for name, extra in DECISIONS.items():
        tag = "default" if not extra else "mahalanobis"
        ood_rows = score(run, f"folder:{folder}", work / f"{tag}-{held_out.replace(',', '')}.csv", extra)
        id_data = f"fashion-mnist:classes={kept}"
        id_rows = score(run, id_data, work / f"{tag}-id-{kept.replace(',', '')}.csv", [*extra, "--split", "test"])
        held_id = [r for r in id_rows if int(r["index"]) not in calibration]
        column = "combined" if not extra else "mahalanobis"
        decisions[name] = decide(held_id, ood_rows, column)
    acceptance = decisions["default (combined)"]["id_accepted"]
    for entry in decisions.values():
        entry["flagged_at_default_acceptance"] = flags_at_acceptance(entry, acceptance)
    result["held_out_id_images"] = len(decisions["mahalanobis"]["_id"])
    result["decisions"] = {n: {k: v for k, v in e.items() if not k.startswith("_")} for n, e in decisions.items()}
    result["pretrain_seconds"] = seconds
    return result


def markdown(results: list[dict]) -> str:
    lines = [
        "| held-out classes (training classes) | decision | flagged at its threshold | ID accepted | "
        "flagged at the default's acceptance | AUROC |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        for name, d in r["decisions"].items():
            lines.append(
                f"| {r['held_out']} ({r['kept']}) | {name} | {d['flagged']} / {r['held_out_images']} | "
                f"{100 * d['id_accepted']:.1f} % of {r['held_out_id_images']} | "
                f"{d['flagged_at_default_acceptance']} | {d['auroc']:.3f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--splits", nargs="*", default=list(SPLITS), help="held-out classes (default: 8-9 and 2,6)")
    parser.add_argument("--work", default="runs/score-flags")
    parser.add_argument("--out", default="docs/results/ood-default/score-flags.json")
    args = parser.parse_args()
    results = [one_split(held_out, SPLITS[held_out], Path(args.work)) for held_out in args.splits]
    capability = torch.backends.cpu.get_cpu_capability()
    out = Path(args.out)
    write_outputs(out, {"splits": results, "cpu_capability": capability, "calibration": CALIBRATION}, markdown(results))


if __name__ == "__main__":
    main()
