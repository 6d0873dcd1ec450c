"""Suite options: typed, validated before any work, and one-line CLI errors (exit 2, no traceback)."""

import pytest

from probcl.cli import main
from probcl.errors import ConfigError
from probcl.eval import SUITES
from probcl.eval.lipschitz import LipschitzOptions
from probcl.eval.ood import OodOptions


def test_options_are_converted_to_their_declared_types():
    ood = SUITES.get("ood").parse_options({"knn_k": "1,10", "datasets": "digits", "dropout": "0.5"})
    assert ood == OodOptions(knn_k=[1, 10], datasets=["digits"], dropout=0.5)
    assert SUITES.get("ood").parse_options({"knn_k": 10}).knn_k == [10]
    assert SUITES.get("lipschitz").parse_options({"kappa": "run"}) == LipschitzOptions(kappa="run")
    assert SUITES.get("lipschitz").parse_options({"kappa": 512}).kappa == 512.0
    assert SUITES.get("knn").parse_options(None).knn_k == 200


@pytest.mark.parametrize(
    "suite, raw, message",
    [
        ("knn", {"nope": 1}, r"unknown suite option knn\.nope; valid options: knn_k, temperature, plain_k"),
        ("linear", {"nope": 1}, r"linear\.nope; valid options: probes, sgd"),
        ("linear", {"probes": ["adam"]}, r"linear\.probes.* must be one of lbfgs, sgd"),
        ("knn", {"nope": 1, "knn_k": 2}, r"knn\.nope"),
        ("knn", {"knn_k": 0}, r"knn\.knn_k must be >= 1, got 0"),
        ("knn", {"knn_k": "many"}, r"knn\.knn_k must be an integer"),
        ("ood", {"dropout": 1.5}, r"ood\.dropout must be in \[0, 1\)"),
        ("calibration", {"holdout": 1}, r"calibration\.holdout must be in \(0, 1\)"),
        ("lipschitz", {"strengths": [0.4, 0.4]}, r"lipschitz\.strengths needs 4 values"),
        ("lipschitz", {"layer": "pixels"}, r"lipschitz\.layer must be one of encoder, projection"),
        ("corruptions", {"corruptions": ["fog"]}, r"corruptions\.corruptions\[0\] must be one of .*; got 'fog'"),
        ("fewshot", {"fractions": [0.1, 0.0]}, r"fewshot\.fractions\[1\] must be in \(0, 1\], got 0\.0"),
        ("transfer", {"seed": -1}, r"transfer\.seed must be in \[0, 4294967295\], got -1"),
    ],
)
def test_bad_options_name_the_suite_key(suite, raw, message):
    with pytest.raises(ConfigError, match=message):
        SUITES.get(suite).parse_options(raw)


def test_options_for_a_suite_that_is_not_run_are_an_error():
    with pytest.raises(ConfigError, match="options given for suite.* knn that are not being run"):
        SUITES.parse_all(["linear"], {"knn": {"knn_k": 5}})


@pytest.mark.parametrize(
    "suites, option, message",
    [
        ("linear", "linear.nope=1", "unknown suite option linear.nope"),
        ("linear,knn", "knn.knn_k=-3", "knn.knn_k must be >= 1"),
        ("linear", "knn.knn_k=5", "not being run"),
        ("linear", "linear", "must look like SUITE.KEY=VALUE"),
    ],
)
def test_cli_option_errors_are_one_line_and_exit_2(tmp_path, capsys, suites, option, message):
    # the run does not exist: options are checked before the run is even looked at
    code = main(["evaluate", str(tmp_path / "run"), "--suite", suites, "--option", option])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("probcl: config error: ") and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
