"""C-SimCLR's settings, C-BYOL and the local Lipschitz estimate against plain re-implementations of the CEB paper's
equations (Figure 6 pseudocode, Eq. 19/36) with scipy's Bessel functions, plus tiny training runs (the C-SimCLR
loss itself: tests/losses/test_ceb.py)."""

import math

import numpy as np
import pytest
import torch

from probcl.config import ConfigError, from_dict
from probcl.core.layout import RunPaths
from probcl.distributions.vmf import VonMisesFisher
from probcl.eval.lipschitz import local_lipschitz, perturb
from probcl.methods import METHODS
from probcl.methods.c_simclr import CSimCLRParams
from probcl.report.lipschitz import plot_lipschitz_histograms
from probcl.tasks.evaluate import EvaluateSettings, evaluate_run
from probcl.tasks.pretrain import pretrain
from tests.losses.ceb_reference import a_n, log_c, unit

DATA_INFO = dict(dataset="digits", channels=1, image_size=12, num_classes=None, mean=[0.5], std=[0.5])


def test_c_simclr_params_validation():
    with pytest.raises(ConfigError, match="beta = 0"):
        from_dict(CSimCLRParams, {"kappa_e": math.inf}, "method_args")
    with pytest.raises(ConfigError, match="candidates"):
        from_dict(CSimCLRParams, {"candidates": "all"}, "method_args")
    with pytest.raises(ConfigError, match="kappa_b"):
        from_dict(CSimCLRParams, {"kappa_b": 0}, "method_args")


# ------------------------------------------------------------------------------ C-BYOL
def c_byol_step(cfg):
    """A C-BYOL model from ``cfg``, two seeded batches of 8 views, and its step on them (z drawn at seed 5)."""
    model = METHODS.get("c-byol")(cfg.to_dict(), DATA_INFO).train()
    g = torch.Generator().manual_seed(1)
    v1, v2 = torch.randn(8, 1, 12, 12, generator=g), torch.randn(8, 1, 12, 12, generator=g)
    torch.manual_seed(5)
    return model, v1, v2, model.step(v1, v2, None)


def test_c_byol_step_matches_figure6_pseudocode(tiny_config):
    torch.manual_seed(0)
    cfg = tiny_config("c-byol", **{"method_args.kappa_e": 400.0, "method_args.beta": 0.5, "train.batch_size": 8})
    model, v1, v2, out = c_byol_step(cfg)
    params = [p for n, p in model.named_parameters() if not n.startswith("target_")]
    grads = torch.autograd.grad(out.loss, params, allow_unused=True)
    names = [n for n, _ in model.named_parameters() if not n.startswith("target_")]
    assert all(
        g is not None and g.abs().sum() > 0
        for n, g in zip(names, grads)
        if n.startswith(("l_net", "m_net", "predictor"))
    )

    torch.manual_seed(5)
    with torch.no_grad():
        n = model.cfg.model.proj_out
        p = [model.predictor(model.projector(model.backbone(v))) for v in (v1, v2)]
        t = [unit(model.target_projector(model.target_backbone(v))) for v in (v1, v2)]
        mu_e = [torch.tensor(unit(pi)) for pi in p]
        z = [VonMisesFisher(m, 400.0).rsample() for m in mu_e]

        def direction(i, j):  # x = view i, x' = view j
            y_hat = unit(model.l_net(z[i].float()))
            mu_b = unit(model.m_net(torch.tensor(t[i])))
            zi = z[i].numpy()
            total = []
            for k in range(len(zi)):
                byol = ((y_hat[k] - t[j][k]) ** 2).sum()
                log_e = log_c(n, 400.0) + 400.0 * mu_e[i][k].numpy() @ zi[k]
                log_b = log_c(n, 10.0) + 10.0 * mu_b[k] @ zi[k]
                total.append(2.0 * byol + 0.5 * (log_e - log_b))
            return np.mean(total)

        reference = direction(0, 1) + direction(1, 0)
    assert out.loss.item() == pytest.approx(reference, rel=1e-4)


def test_c_byol_without_compression_is_byol_on_the_sampled_z_and_every_parameter_learns(tiny_config):
    """beta 0 (the paper's ablation): no b(z|y), so no m, whose weights no loss would reach (an unused
    parameter under DDP; Adam's weight decay alone drove it to 0 and its mean direction to NaN)."""
    cfg = tiny_config("c-byol", **{"method_args.kappa_e": 400.0, "method_args.beta": 0.0, "train.batch_size": 8})
    model, v1, v2, out = c_byol_step(cfg)
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad and not n.startswith("target_")]
    grads = torch.autograd.grad(out.loss, [p for _, p in trainable], allow_unused=True)
    unused = [n for (n, _), g in zip(trainable, grads) if g is None or not g.abs().sum() > 0]
    assert unused == [] and "residual_xzy" not in out.logs

    torch.manual_seed(5)
    with torch.no_grad():
        p = [model.predictor(model.projector(model.backbone(v))) for v in (v1, v2)]
        t = [unit(model.target_projector(model.target_backbone(v))) for v in (v1, v2)]
        z = [VonMisesFisher(torch.tensor(unit(pi)), 400.0).rsample() for pi in p]
        y_hat = [unit(model.l_net(zi.float())) for zi in z]
    reference = sum(2.0 * ((y_hat[i] - t[j]) ** 2).sum(axis=1).mean() for i, j in ((0, 1), (1, 0)))
    assert out.loss.item() == pytest.approx(reference, rel=1e-4)


# ------------------------------------------------------------------------------ Lipschitz
def test_local_lipschitz_matches_eq19_and_eq36():
    torch.manual_seed(0)
    n, kappa = 8, 1024.0
    mx = torch.nn.functional.normalize(torch.randn(5, n, dtype=torch.float64), dim=1)
    mdx = torch.nn.functional.normalize(mx + 0.05 * torch.randn(5, n, dtype=torch.float64), dim=1)
    dx = torch.tensor([0.5, 1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    torch.manual_seed(9)
    sampled, bound = local_lipschitz(mx, mdx, dx, kappa)
    torch.manual_seed(9)
    z = VonMisesFisher(mx, kappa).sample().numpy()
    x, y = mx.numpy(), mdx.numpy()
    ref_sampled = np.abs(kappa * ((x - y) * z).sum(1)) / dx.numpy()  # the log C terms cancel
    kl = kappa * a_n(n, kappa) * (1 - (x * y).sum(1))  # equal kappas: both KLs are equal
    np.testing.assert_allclose(sampled.numpy(), ref_sampled, rtol=1e-6)
    np.testing.assert_allclose(bound.numpy(), np.sqrt(kl) / dx.numpy(), rtol=1e-6)


def test_perturbations_follow_the_view_generator_formulas():
    x = torch.rand(2, 1, 6, 6)
    torch.testing.assert_close(perturb(x, "brightness", 0.4), (x * 1.4).clamp(0, 1))
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    torch.testing.assert_close(perturb(x, "contrast", -0.4), (mean + 0.6 * (x - mean)).clamp(0, 1))


# ------------------------------------------------------------------------------ tiny runs
def test_tiny_runs_write_checkpoints_and_lipschitz_suite(tiny_config, tmp_path):
    runs = {}
    for method in ("c-simclr", "c-byol"):
        root = pretrain(tiny_config(method, run_name=method))
        assert RunPaths(root).last.exists()
        runs[method] = root
    result = evaluate_run(runs["c-simclr"], ["lipschitz"], EvaluateSettings(options={"lipschitz": {"max_images": 64}}))[
        "lipschitz"
    ]
    for name in ("brightness+", "brightness-", "contrast+", "contrast-"):
        assert np.isfinite(result[name]) and result[name] >= 0
        assert np.isfinite(result[f"{name} kl_bound"]) and result[f"{name} kl_bound"] >= 0
    assert result["protocol"]["kappa"] == 1024.0 and "saturation+" not in result
    assert result["protocol"]["kappa_source"] == "the run's kappa_e (default)"
    assert (RunPaths(runs["c-simclr"]).plots / "lipschitz.png").stat().st_size > 0
    byol = evaluate_run(
        runs["c-byol"],
        ["lipschitz"],
        EvaluateSettings(options={"lipschitz": {"max_images": 32, "kappa": "run"}}, figures=False),
    )["lipschitz"]
    assert not RunPaths(runs["c-byol"]).plots.exists()  # suites write no files: figures come from report/ hooks
    assert byol["protocol"]["kappa"] == 16384.0 and byol["protocol"]["embedding"] == "method's e(z|x) mean direction"
    for name in ("brightness+", "contrast-"):  # figure data: every pair counted once per quantity
        for quantity in ("sampled", "kl_bound"):
            hist = result["histograms"][quantity][name]
            assert sum(hist["counts"]) == result["protocol"]["pairs"][name] and len(hist["edges"]) == 41
    default = evaluate_run(
        runs["c-byol"], ["lipschitz"], EvaluateSettings(options={"lipschitz": {"max_images": 8}}, figures=False)
    )["lipschitz"]["protocol"]
    assert default["kappa"] == 16384.0 and default["kappa_source"] == "the run's kappa_e (default)"  # not 1024
    figure = plot_lipschitz_histograms({"C-SimCLR": result, "C-BYOL": byol}, tmp_path / "both.png")
    assert figure.stat().st_size > 0
