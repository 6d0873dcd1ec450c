"""Few labels (CEB Table 2's label fractions): the linear probe fitted on a class-stratified, seeded
1% / 10% of the training labels, evaluated on the full test set."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from probcl.config import InRange, Seed
from probcl.data.sources import labeled_subset
from probcl.errors import ConfigError
from probcl.eval.context import ModelOnData
from probcl.eval.linear import linear_probe
from probcl.eval.suites import SUITES


@dataclass
class FewshotOptions:
    fractions: list[Annotated[float, InRange(0, 1, low_open=True)]] = field(
        default_factory=lambda: [0.01, 0.1]
    )  # shares of the training labels
    seed: Seed = 0  # seed of the stratified label subsets


@SUITES.register("fewshot", options=FewshotOptions, title="Few labels")
def fewshot_suite(ctx: ModelOnData, options: FewshotOptions) -> dict:
    """Top-1/top-5 test accuracy (%) of linear probes trained on each fraction of the labels; a fraction that
    gives fewer than two labels per class is left out (with a note), and the suite stops only when all are."""
    seed = options.seed
    train_f, train_y = ctx.features("train")
    test_f, test_y = ctx.features("test")
    result: dict = {}
    labels_used, too_few = {}, {}
    for fraction in options.fractions:
        idx = labeled_subset(train_y, fraction, seed)
        key = f"{100 * fraction:g}%"
        if len(idx) < 2 * ctx.num_classes:
            too_few[key] = (
                f"{fraction:g} of {len(train_y)} training labels is {len(idx)} images, too few to fit and validate "
                f"a probe for {ctx.num_classes} classes"
            )
            continue
        probe_result, _ = linear_probe(train_f[idx], train_y[idx], test_f, test_y, ctx.num_classes, seed=seed)
        result[key] = {k: v for k, v in probe_result.items() if k != "protocol"}
        labels_used[key] = len(idx)
    # --max-train helps only when it capped the training images; otherwise every labelled image was used
    capped = ctx.max_train is not None and len(train_y) >= ctx.max_train
    fix = "raise --max-train or fewshot.fractions" if capped else "raise fewshot.fractions or add labelled images"
    if not result:
        raise ConfigError(f"fewshot: {'; '.join(too_few.values())}; {fix}")
    for key, reason in too_few.items():
        ctx.note(f"fewshot: {key} of the labels left out ({reason}); {fix}")
    result["protocol"] = ctx.protocol(
        labels=labels_used,
        left_out=too_few or None,
        subsets=f"class-stratified, at least one per class, seed {seed}",
        probe="multinomial logistic regression (L-BFGS), L2 chosen on 10% of the labeled subset; "
        "CEB fine-tunes instead, this is the linear-evaluation variant",
    )
    return result
