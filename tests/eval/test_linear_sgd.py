"""The papers' SGD linear probe: converges to the convex optimum (scikit-learn's, independently computed) on a
small problem, keeps VEM Appendix D's settings by default, and is reachable as a suite option."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss

from probcl.core.typed_config import parse_suite_options
from probcl.eval import SUITES
from probcl.eval.linear_sgd import (
    HELDOUT_LRS,
    SGDProbeOptions,
    fit_sgd_classifier,
    sgd_heldout_probe,
    sgd_linear_probe,
)


def blobs(n_per_class: int = 100, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Three overlapping 4-d Gaussian classes (not separable, so the penalised optimum is interior)."""
    rng = np.random.default_rng(seed)
    centres = np.array([[1.0, 0.0, 0.5, 0.0], [0.0, 1.0, -0.5, 0.5], [-1.0, -0.5, 0.0, -0.5]])
    x = np.concatenate([rng.normal(c, 1.0, size=(n_per_class, 4)) for c in centres])
    y = np.repeat(np.arange(3), n_per_class)
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y)


@pytest.mark.parametrize("batch_size, atol", [(300, 1e-4), (50, 0.03)])
def test_sgd_probe_reaches_the_l2_penalised_logistic_regression_optimum(batch_size, atol):
    """Full-batch: to the optimum's 4th decimal; mini-batches of 50: within the gradient noise's reach."""
    x, y = blobs()
    wd = 0.01  # mean CE + wd/2 ||W||^2 (bias free) = scikit-learn's C sum CE + 1/2 ||W||^2 with C = 1 / (n wd)
    epochs, lr = (300, 1.0) if batch_size == 300 else (60, 0.2)
    options = SGDProbeOptions(epochs=epochs, lr=lr, batch_size=batch_size, weight_decay=wd)
    probe = fit_sgd_classifier(x, y, 3, options, seed=0)
    reference = LogisticRegression(C=1.0 / (len(x) * wd), tol=1e-10, max_iter=10_000).fit(x.numpy(), y.numpy())
    np.testing.assert_allclose(probe.weight.numpy(), reference.coef_, atol=atol)
    np.testing.assert_allclose(probe.bias.numpy(), reference.intercept_ - reference.intercept_.mean(), atol=atol)
    np.testing.assert_allclose(probe.logits(x).softmax(1).numpy(), reference.predict_proba(x.numpy()), atol=atol)


def test_without_decay_an_unstandardized_sgd_probe_keeps_the_raw_feature_scale():
    x, y = blobs(seed=1)
    probe = fit_sgd_classifier(x * 100.0, y, 3, SGDProbeOptions(epochs=5, lr=1e-4), seed=0)
    assert torch.equal(probe.mean, torch.zeros(4)) and torch.equal(probe.std, torch.ones(4))
    standardized = fit_sgd_classifier(x * 100.0, y, 3, SGDProbeOptions(epochs=5, lr=0.1, standardize=True))
    torch.testing.assert_close(standardized.std, (x * 100.0).std(0))


def test_defaults_are_vem_appendix_d_and_the_result_records_them():
    assert SGDProbeOptions() == SGDProbeOptions(epochs=200, lr=5.0, batch_size=256, momentum=0.9, weight_decay=0.0)
    x, y = blobs()
    result, _ = sgd_linear_probe(x, y, x, y, 3, SGDProbeOptions(epochs=2, lr=0.1), seed=0)
    assert result["protocol"]["epochs"] == 2 and result["protocol"]["lr"] == 0.1
    assert 0.0 <= result["top1"] <= 100.0


def test_a_diverging_probe_is_one_config_error():
    from probcl.errors import ConfigError

    x, y = blobs()
    with pytest.raises(ConfigError, match="diverged at lr 1e\\+30"):
        fit_sgd_classifier(x * 1e20, y, 3, SGDProbeOptions(epochs=3, lr=1e30))


def test_the_linear_and_calibration_suites_take_the_probes_and_the_sgd_settings():
    options = parse_suite_options(["linear.probes=lbfgs,sgd", "linear.sgd.lr=0.5", "calibration.probes=sgd"])
    linear = SUITES.get("linear").parse_options(options["linear"])
    assert linear.probes == ["lbfgs", "sgd"] and linear.sgd.lr == 0.5 and linear.sgd.epochs == 200
    assert SUITES.get("calibration").parse_options(options["calibration"]).probes == ["sgd"]
    assert SUITES.get("linear").parse_options(None).probes == ["lbfgs"]  # probcl's default stays L-BFGS


def test_the_heldout_probe_is_not_misscheduled_where_the_papers_is():
    """Features 30x the unit scale: the paper's lr 5 on raw features drives the classifier far past the optimum
    (test NLL several times scikit-learn's logistic regression's, fitted independently), while the sgd-heldout
    probe (standardised features, lr chosen on held-out training features) lands within 10 % of it."""
    x, y = blobs(200, seed=2)
    test_x, test_y = blobs(200, seed=3)
    x, test_x = 30 * x, 30 * test_x
    reference = LogisticRegression(C=1.0, max_iter=10_000).fit(x.numpy(), y.numpy())
    ref_nll = log_loss(test_y.numpy(), reference.predict_proba(test_x.numpy()))

    def nll(probe) -> float:
        return float(torch.nn.functional.cross_entropy(probe.logits(test_x).double(), test_y))

    _, paper = sgd_linear_probe(x, y, test_x, test_y, 3)
    result, heldout = sgd_heldout_probe(x, y, test_x, test_y, 3)
    assert nll(paper) > 2 * ref_nll
    assert nll(heldout) == pytest.approx(ref_nll, rel=0.10)
    assert result["protocol"]["standardize"] and result["protocol"]["lr"] in HELDOUT_LRS
    scores = result["protocol"]["heldout_nll_by_lr"]
    assert scores[f"{result['protocol']['lr']:g}"] == min(scores.values())


def test_the_heldout_probe_never_sees_the_test_labels():
    x, y = blobs(seed=4)
    test_x, test_y = blobs(seed=5)
    first, probe = sgd_heldout_probe(x, y, test_x, test_y, 3, seed=1)
    shuffled, other = sgd_heldout_probe(x, y, test_x, test_y[torch.randperm(len(test_y))], 3, seed=1)
    assert first["protocol"] == shuffled["protocol"] and torch.equal(probe.weight, other.weight)


def test_the_heldout_probe_is_a_suite_option_beside_the_papers():
    options = parse_suite_options(["calibration.probes=lbfgs,sgd,sgd-heldout"])
    assert SUITES.get("calibration").parse_options(options["calibration"]).probes == ["lbfgs", "sgd", "sgd-heldout"]
