"""Corruption robustness: linear-probe accuracy on corrupted test images (``probcl.data.corruptions``),
per corruption and severity, their mean, and the corruption error relative to a reference run
(Hendrycks & Dietterich 2019: CE_c = sum_s E_{s,c} / sum_s E^ref_{s,c}; relative CE subtracts the
clean errors first; mCE and relative mCE average them over corruptions, in %)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from probcl.config import AtLeast, OneOf, Seed
from probcl.core.io import read_json
from probcl.data.corruptions import CORRUPTIONS, SEVERITIES, corrupt
from probcl.data.sources import TensorImages
from probcl.errors import DatasetError
from probcl.eval.context import ModelOnData
from probcl.eval.inputs import id_test_images, probe_logits
from probcl.eval.suites import SUITES


def corruption_accuracies(ctx: ModelOnData, names: list[str], max_images: int | None, seed: int) -> dict:
    """{"clean": top-1, "top1": {corruption: [top-1 at severity 1..5]}, "images": n} of the context's probe."""
    data, _ = id_test_images(ctx, "corruptions", max_images, seed)
    labels = data.labels()
    if labels is None:
        raise DatasetError(f"{data.name}: the corruptions suite needs labeled test images")

    def top1(images) -> float:
        logits = probe_logits(ctx, TensorImages(images, labels, data.name, data.num_classes), f"{data.name} corrupted")
        return 100.0 * float((logits.argmax(1) == labels).double().mean())

    return {
        "clean": top1(data.images),
        "images": len(data),
        "top1": {name: [top1(corrupt(data.images, name, s, seed)) for s in SEVERITIES] for name in names},
    }


def corruption_errors(run: dict, reference: dict) -> dict:
    """CE and relative CE per corruption, mCE and relative mCE (all in %) against a reference's accuracies."""
    ce, relative = {}, {}
    for name, accs in run["top1"].items():
        err = [100.0 - a for a in accs]
        ref = [100.0 - a for a in reference["top1"][name]]
        ce[name] = 100.0 * sum(err) / sum(ref) if sum(ref) > 0 else None
        ref_drop = sum(r - (100.0 - reference["clean"]) for r in ref)
        drop = sum(e - (100.0 - run["clean"]) for e in err)
        relative[name] = 100.0 * drop / ref_drop if ref_drop > 0 else None
    return {"mce": _mean(ce.values()), "relative_mce": _mean(relative.values()), "ce": ce, "relative_ce": relative}


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _reference_accuracies(
    ctx: ModelOnData, reference: str, protocol: dict, names: list[str], max_images: int | None, seed: int
) -> dict:
    """The reference run's accuracies: from its eval.json when measured under the same protocol, else measured."""
    stored = read_json(Path(reference) / "eval.json", {}).get("corruptions")
    same = stored and all(
        stored["protocol"].get(k) == protocol[k]
        for k in ("images", "seed", "feature_layer", "train_images", "corruptions")
    )
    if same:
        return {"clean": stored["clean_top1"], "top1": stored["per_severity"]}
    return corruption_accuracies(ctx.for_run(reference), names, max_images, seed)


@dataclass
class CorruptionsOptions:
    corruptions: list[Annotated[str, OneOf(CORRUPTIONS)]] | None = None  # default: all of probcl.data.corruptions
    max_images: Annotated[int | None, AtLeast(1)] = 2000  # seeded test subset
    seed: Seed = 0
    reference: str | None = None  # run directory: mCE / relative mCE against it


@SUITES.register("corruptions", options=CorruptionsOptions, title="Corruption robustness")
def corruptions_suite(ctx: ModelOnData, options: CorruptionsOptions) -> dict:
    """Top-1 (%) of the linear probe under each corruption x 5 severities, the mean over all of them,
    and mCE / relative mCE against a ``reference`` run when given."""
    names = options.corruptions or CORRUPTIONS.names()
    max_images, seed, reference = options.max_images, options.seed, options.reference
    accs = corruption_accuracies(ctx, names, max_images, seed)
    per_corruption = {name: sum(v) / len(v) for name, v in accs["top1"].items()}
    result = {
        "clean_top1": accs["clean"],
        "mean_top1": sum(per_corruption.values()) / len(per_corruption),
        "per_corruption": per_corruption,
        "per_severity": accs["top1"],
    }
    result["protocol"] = ctx.protocol(
        images=accs["images"],
        seed=seed,
        corruptions=names,
        severities=list(SEVERITIES),
        probe="offline linear probe of the `linear` suite (fitted on clean images)",
        reference=reference,
    )
    if reference:
        own = ctx.run_dir is not None and Path(reference).resolve() == ctx.run_dir.resolve()
        ref = accs if own else _reference_accuracies(ctx, reference, result["protocol"], names, max_images, seed)
        result.update(corruption_errors(accs, ref))
    return result
