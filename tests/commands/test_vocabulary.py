"""One word per meaning across sub-commands (docs/glossary.md); every retired spelling still works for one release
and says its new name in one line."""

from __future__ import annotations

import pytest

from probcl.cli import build_parser
from probcl.config import parse_overrides
from probcl.eval import SUITES

RETIRED_FLAGS = [  # (command line: the retired flag is argv[2], the new flag named, the parsed attribute and its value)
    (["score", "RUN", "--data", "digits"], "--dataset", "dataset", "digits"),
    (["score", "RUN", "--k", "7", "--dataset", "digits"], "--knn-k", "knn_k", 7),
    (["score", "RUN", "--batch-size", "64", "--dataset", "digits"], "--inference-batch-size", "batch_size", 64),
    (["evaluate", "RUN", "--batch-size", "64"], "--inference-batch-size", "batch_size", 64),
    (["sample", "RUN", "--init", "data"], "--start", "start", "data"),
    (["sample", "RUN", "--data", "digits"], "--dataset", "dataset", "digits"),
]


@pytest.mark.parametrize("argv, new, attribute, value", RETIRED_FLAGS)
def test_a_retired_flag_still_works_and_names_its_new_spelling(argv, new, attribute, value, capsys):
    parser, _ = build_parser()
    args, _ = parser.parse_known_args(argv)
    assert getattr(args, attribute) == value
    err = capsys.readouterr().err
    old = argv[2]
    assert err == f"probcl: deprecated: {old} is now {new}; {old} stops working in probcl 0.3\n"


@pytest.mark.parametrize("argv, new, attribute, value", RETIRED_FLAGS)
def test_the_new_spelling_gives_the_same_value_silently(argv, new, attribute, value, capsys):
    parser, _ = build_parser()
    args, _ = parser.parse_known_args([*argv[:2], new, *argv[3:]])
    assert getattr(args, attribute) == value and capsys.readouterr().err == ""


def test_the_knn_suites_neighbour_count_is_knn_k_and_k_still_works(capsys):
    assert SUITES.get("knn").parse_options({"knn_k": 20}).knn_k == 20
    assert capsys.readouterr().err == ""
    assert SUITES.get("knn").parse_options({"k": 20}).knn_k == 20
    assert capsys.readouterr().err == "probcl: deprecated: knn.k is now knn.knn_k; knn.k stops working in probcl 0.3\n"


def test_training_and_inference_batches_have_different_flags(capsys):
    parser, _ = build_parser()
    help_texts = {
        name: parser._subparsers._group_actions[0].choices[name].format_help() for name in ("evaluate", "score")
    }
    assert all("--inference-batch-size" in text and "--batch-size" not in text for text in help_texts.values())


def test_a_config_key_is_spelled_as_in_yaml_and_its_dashed_spelling_still_works(capsys):
    assert parse_overrides(["--train.batch-size", "8", "--model.cifar-stem=false"]) == {
        "train.batch_size": 8,
        "model.cifar_stem": False,
    }
    assert capsys.readouterr().err.splitlines() == [
        "probcl: deprecated: --train.batch-size is now --train.batch_size; --train.batch-size stops working in "
        "probcl 0.3",
        "probcl: deprecated: --model.cifar-stem is now --model.cifar_stem; --model.cifar-stem stops working in "
        "probcl 0.3",
    ]
    # the documented spellings, and pretrain's short forms (dashed flags, not config keys), are silent
    tokens = ["--train.batch_size", "8", "--model.cifar_stem=false", "--batch-size", "8", "--train-subset", "50"]
    assert parse_overrides(tokens) == {"train.batch_size": 8, "model.cifar_stem": False, "data.train_subset": 50}
    assert capsys.readouterr().err == ""
