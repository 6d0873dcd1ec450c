"""Transfer (EBCLR Table 2, VEM Table 3b): the encoder pretrained on dataset A stays frozen and a
linear probe is fitted on dataset B's training images and tested on B's test images."""

from __future__ import annotations

from dataclasses import dataclass

from probcl.config import Seed
from probcl.errors import ConfigError, DatasetError
from probcl.eval.context import ModelOnData
from probcl.eval.linear import linear_probe
from probcl.eval.suites import SUITES

DEFAULT_TARGETS = {
    "fashion-mnist": ["digits"],
    "mnist": ["fashion-mnist"],
    "digits": ["fashion-mnist"],
    "cifar10": ["cifar100"],
    "cifar100": ["cifar10"],
    "stl10": ["cifar10"],
}


@dataclass
class TransferOptions:
    datasets: list[str] | None = None  # target dataset specs (default: one per training dataset)
    seed: Seed = 0


@SUITES.register("transfer", options=TransferOptions, title="Transfer")
def transfer_suite(ctx: ModelOnData, options: TransferOptions) -> dict:
    """Top-1/top-5 (%) of a linear probe on each target dataset's frozen features."""
    seed = options.seed
    source = ctx.info.dataset
    targets = options.datasets or DEFAULT_TARGETS.get(source)
    if not targets:
        raise ConfigError(f"no default transfer target for {source}; pass --option transfer.datasets=SPEC[,SPEC]")
    result: dict = {}
    images = {}
    for spec in targets:
        train_f, train_y = ctx.features("train", spec)
        test_f, test_y = ctx.features("test", spec)
        if (train_y < 0).any() or (test_y < 0).any():
            raise DatasetError(f"transfer target {spec} has unlabeled images; it needs class labels")
        classes = int(max(train_y.max(), test_y.max())) + 1
        probe_result, _ = linear_probe(train_f, train_y, test_f, test_y, classes, seed=seed)
        result[spec] = {k: v for k, v in probe_result.items() if k != "protocol"}
        images[spec] = {"train": len(train_f), "test": len(test_f)}
    result["protocol"] = ctx.protocol(
        source=source,
        images=images,
        probe="multinomial logistic regression (L-BFGS) on frozen features, "
        "L2 chosen on 10% of the target's training features",
        resized="targets conformed to the model's input",
    )
    return result
