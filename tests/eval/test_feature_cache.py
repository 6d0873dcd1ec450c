"""Features are computed once per checkpoint, layer and precision: a second context on the same run reads them from
RUN/feature-cache/ without running the encoder; a rewritten checkpoint, another precision or a damaged file
computes them again."""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from conftest import tiny_overrides

from probcl.config import load_config
from probcl.core.layout import find_checkpoint
from probcl.eval import context
from probcl.eval.context import ModelOnData
from probcl.tasks.pretrain import pretrain

MAX_TRAIN = 200


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return pretrain(load_config(None, tiny_overrides(tmp_path_factory.mktemp("feature-cache") / "run")))


@pytest.fixture
def extractions(run, monkeypatch):
    """The images each encoder pass of ModelOnData ran through (one entry per extraction), from an empty cache."""
    shutil.rmtree(run / "feature-cache", ignore_errors=True)
    calls: list[int] = []
    extract = context.extract

    def counted(fn, dataset, *args, **kwargs):
        calls.append(len(dataset))
        return extract(fn, dataset, *args, **kwargs)

    monkeypatch.setattr(context, "extract", counted)
    return calls


def features(run, **settings):
    return ModelOnData(run, "cpu", max_train=MAX_TRAIN, **settings).features("train")


def test_a_second_context_reads_the_features_without_the_encoder(run, extractions):
    first, labels = features(run)
    assert extractions == [MAX_TRAIN] and len(list((run / "feature-cache").glob("*.pt"))) == 1
    # the encoder's own features of these images, computed outside the cache
    ctx = ModelOnData(run, "cpu", max_train=MAX_TRAIN)
    direct, direct_labels = ctx.extract(ctx.dataset(None, "train"), "reference")
    second, second_labels = features(run)
    assert extractions == [MAX_TRAIN, MAX_TRAIN]  # the second context ran no encoder pass of its own
    assert torch.equal(second, direct) and torch.equal(first, direct) and second.dtype == torch.float32
    assert torch.equal(second_labels, direct_labels) and torch.equal(labels, direct_labels)


def test_another_subset_or_precision_is_computed_again(run, extractions):
    features(run)
    extractions.clear()
    features(run, seed=1)  # another seeded training subset
    features(run, requested_precision="bf16")
    assert extractions == [MAX_TRAIN, MAX_TRAIN]
    features(run, requested_precision="bf16")
    assert extractions == [MAX_TRAIN, MAX_TRAIN]


def test_a_rewritten_checkpoint_or_a_damaged_file_is_computed_again(run, extractions):
    features(run)
    extractions.clear()
    checkpoint = find_checkpoint(run)
    stat = checkpoint.stat()
    os.utime(checkpoint, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # as a rewrite leaves it
    features(run)
    assert extractions == [MAX_TRAIN]
    for path in (run / "feature-cache").glob("*.pt"):
        path.write_bytes(b"not a torch file")
    fresh, _ = features(run)
    assert extractions == [MAX_TRAIN, MAX_TRAIN]
    again, _ = features(run)  # the damaged file was rewritten
    assert extractions == [MAX_TRAIN, MAX_TRAIN] and torch.equal(again, fresh)


def test_a_context_that_does_not_store_leaves_no_file(run, extractions):
    features(run, store_features=False)
    assert extractions == [MAX_TRAIN] and not list((run / "feature-cache").glob("*.pt"))


def test_the_cli_stores_features_unless_told_not_to(run, extractions):
    """`probcl evaluate RUN` keeps the features; `--no-feature-cache` neither writes nor needs the cache."""
    from probcl.cli import main

    assert main(["evaluate", str(run), "--suite", "knn", "--max-train", str(MAX_TRAIN), "--no-report",
                 "--no-feature-cache"]) == 0  # fmt: skip
    assert extractions and not list((run / "feature-cache").glob("*.pt"))
    assert main(["evaluate", str(run), "--suite", "knn", "--max-train", str(MAX_TRAIN), "--no-report"]) == 0
    assert list((run / "feature-cache").glob("*.pt"))
