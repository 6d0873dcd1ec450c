"""Few labels (CEB Table 2's label fractions): the linear probe fitted on a class-stratified, seeded
1% / 10% of the training labels, evaluated on the full test set."""

from __future__ import annotations

from dataclasses import dataclass, field

from probcl.data.datasets import labeled_subset
from probcl.errors import ConfigError
from probcl.eval.context import ModelOnData
from probcl.eval.linear import linear_probe
from probcl.eval.suites import SUITES


@dataclass
class FewshotOptions:
    fractions: list[float] = field(default_factory=lambda: [0.01, 0.1])  # shares of the training labels
    seed: int = 0  # seed of the stratified label subsets

    def __post_init__(self) -> None:
        for fraction in self.fractions:
            if not 0 < fraction <= 1:
                raise ConfigError(f"fewshot.fractions must be in (0, 1], got {fraction}")


@SUITES.register("fewshot", options=FewshotOptions, title="Few labels")
def fewshot_suite(ctx: ModelOnData, options: FewshotOptions) -> dict:
    """Top-1/top-5 test accuracy (%) of linear probes trained on each fraction of the labels."""
    seed = options.seed
    train_f, train_y = ctx.features("train")
    test_f, test_y = ctx.features("test")
    result: dict = {}
    labels_used = {}
    for fraction in options.fractions:
        idx = labeled_subset(train_y, fraction, seed)
        if len(idx) < 2 * ctx.num_classes:
            raise ConfigError(
                f"{fraction:g} of {len(train_y)} training labels is {len(idx)} images, too few to fit "
                f"and validate a probe for {ctx.num_classes} classes; raise --max-train or the fraction"
            )
        probe_result, _ = linear_probe(train_f[idx], train_y[idx], test_f, test_y, ctx.num_classes, seed=seed)
        key = f"{100 * fraction:g}%"
        result[key] = {k: v for k, v in probe_result.items() if k != "protocol"}
        labels_used[key] = len(idx)
    result["protocol"] = ctx.protocol(
        labels=labels_used,
        subsets=f"class-stratified, at least one per class, seed {seed}",
        probe="multinomial logistic regression (L-BFGS), L2 chosen on 10% of the labeled subset; "
        "CEB fine-tunes instead, this is the linear-evaluation variant",
    )
    return result
