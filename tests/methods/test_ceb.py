"""C-SimCLR, C-BYOL and the local Lipschitz estimate against plain re-implementations of the CEB paper's
equations (Eq. 7, Figure 5/6 pseudocode, Eq. 19/36) with scipy's Bessel functions, plus tiny training runs."""

import math

import numpy as np
import pytest
import scipy.special as sp
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from probcl.config import ConfigError, from_dict
from probcl.core.layout import RunPaths
from probcl.distributions.vmf import VonMisesFisher
from probcl.eval.lipschitz import local_lipschitz, perturb
from probcl.losses.ceb import c_simclr_loss, residual_information
from probcl.losses.nt_xent import nt_xent_loss
from probcl.methods import METHODS
from probcl.methods.c_simclr import CSimCLRParams
from probcl.report.lipschitz import plot_lipschitz_histograms
from probcl.tasks.evaluate import EvaluateSettings, evaluate_run
from probcl.tasks.pretrain import pretrain

DATA_INFO = dict(dataset="digits", channels=1, image_size=12, num_classes=None, mean=[0.5], std=[0.5])


def log_c(n: int, kappa: float) -> float:
    """log C_n(kappa) = (n/2-1) log kappa - (n/2) log 2pi - log I_{n/2-1}(kappa), via scipy's ive."""
    return (
        (n / 2 - 1) * math.log(kappa) - (n / 2) * math.log(2 * math.pi) - (math.log(sp.ive(n / 2 - 1, kappa)) + kappa)
    )


def a_n(n: int, kappa: float) -> float:
    return sp.ive(n / 2, kappa) / sp.ive(n / 2 - 1, kappa)


def projections(b: int = 12, d: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    h1 = torch.randn(b, d, generator=g, dtype=torch.float64)
    return h1, h1 + 0.7 * torch.randn(b, d, generator=g, dtype=torch.float64)


def unit(x: torch.Tensor) -> np.ndarray:
    x = x.detach().numpy()
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def infonce_eq7(rx: np.ndarray, ry: np.ndarray, tau: float) -> float:
    """Eq. 7 averaged over the batch: -log exp(ry_i.rx_i / tau) / sum_k exp(ry_k.rx_i / tau)."""
    losses = []
    for i in range(len(rx)):
        num = math.exp(ry[i] @ rx[i] / tau)
        den = sum(math.exp(ry[k] @ rx[i] / tau) for k in range(len(ry)))
        losses.append(-math.log(num / den))
    return float(np.mean(losses))


# ------------------------------------------------------------------------------ C-SimCLR loss
def test_c_simclr_deterministic_limit_is_cross_view_infonce_minus_log_b():
    h1, h2 = projections()
    tau = 0.1
    got = c_simclr_loss(h1, h2, kappa_e=math.inf, kappa_b=1 / tau, beta=0.0, candidates="cross-view", gather=False)
    rx, ry = unit(h1), unit(h2)
    reference = infonce_eq7(rx, ry, tau) + infonce_eq7(ry, rx, tau) - 2 * math.log(len(rx))  # Fig. 5: a sum
    assert got.loss.item() == pytest.approx(reference, rel=1e-10)
    assert got.residual is None


def test_c_simclr_deterministic_limit_with_2b_minus_1_candidates_is_nt_xent_minus_log():
    h1, h2 = projections()
    tau = 0.2
    got = c_simclr_loss(h1, h2, kappa_e=math.inf, kappa_b=1 / tau, beta=0.0, candidates="both-views", gather=False)
    reference = 2 * (nt_xent_loss(h1, h2, tau, gather=False).item() - math.log(2 * len(h1) - 1))  # two directions
    assert got.loss.item() == pytest.approx(reference, rel=1e-10)


@pytest.mark.parametrize("candidates", ["cross-view", "both-views"])
def test_c_simclr_matches_figure5_pseudocode(candidates):
    h1, h2 = projections(b=10, d=5)
    kappa_e, kappa_b, beta = 300.0, 10.0, 0.7
    torch.manual_seed(3)
    got = c_simclr_loss(h1, h2, kappa_e, kappa_b, beta, candidates, gather=False)
    torch.manual_seed(3)  # the same z draws: direction x -> y first, then y -> x
    r1, r2 = torch.tensor(unit(h1)), torch.tensor(unit(h2))
    z12 = VonMisesFisher(r1, kappa_e).rsample().numpy()
    z21 = VonMisesFisher(r2, kappa_e).rsample().numpy()
    n, b = h1.shape[1], h1.shape[0]

    def direction(rx, ry, z):
        losses = []
        for i in range(b):
            log_e = log_c(n, kappa_e) + kappa_e * rx[i] @ z[i]
            log_b = log_c(n, kappa_b) + kappa_b * ry[i] @ z[i]
            logits = [log_c(n, kappa_b) + kappa_b * ry[k] @ z[i] for k in range(b)]
            if candidates == "both-views":
                logits += [log_c(n, kappa_b) + kappa_b * rx[k] @ z[i] for k in range(b) if k != i]
            h_yz = -(logits[i] - np.logaddexp.reduce(logits))
            i_yz = math.log(len(logits)) - h_yz
            losses.append(beta * (log_e - log_b) - i_yz)
        return np.mean(losses)

    reference = direction(unit(h1), unit(h2), z12) + direction(unit(h2), unit(h1), z21)  # Figure 5 sums them
    assert got.loss.item() == pytest.approx(reference, rel=1e-8)


def test_residual_information_is_an_unbiased_kl_estimate():
    torch.manual_seed(0)
    n, kappa_e, kappa_b = 16, 1024.0, 10.0
    mu_x = torch.nn.functional.normalize(torch.randn(n, dtype=torch.float64), dim=0)
    mu_y = torch.nn.functional.normalize(mu_x + 0.3 * torch.randn(n, dtype=torch.float64), dim=0)
    e, b = VonMisesFisher(mu_x, kappa_e), VonMisesFisher(mu_y, kappa_b)
    z = e.sample((20000,))
    residual = residual_information(e, b, z).numpy()
    kl = log_c(n, kappa_e) - log_c(n, kappa_b) + a_n(n, kappa_e) * (kappa_e - kappa_b * float(mu_x @ mu_y))
    assert abs(residual.mean() - kl) < 4 * residual.std() / math.sqrt(len(residual))


def _ddp_worker(rank: int, rendezvous: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    h1, h2 = projections(b=8)
    mine = slice(4 * rank, 4 * rank + 4)
    results = {}
    for candidates in ("cross-view", "both-views"):
        x1, x2 = h1[mine].clone().requires_grad_(True), h2[mine].clone().requires_grad_(True)
        loss = c_simclr_loss(x1, x2, math.inf, 10.0, 0.0, candidates, gather=True).loss
        loss.backward()
        results[candidates] = (loss.detach(), x1.grad, x2.grad)
    torch.save(results, f"{out_dir}/rank{rank}.pt")
    dist.destroy_process_group()


def test_c_simclr_gathers_candidates_across_ranks(tmp_path):
    """2 gloo processes with B=4 each: mean rank loss and DDP-averaged input gradients equal one process with B=8."""
    mp.start_processes(
        _ddp_worker, args=(str(tmp_path / "rendezvous"), str(tmp_path)), nprocs=2, join=True, start_method="fork"
    )
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for candidates in ("cross-view", "both-views"):
        h1, h2 = (h.requires_grad_(True) for h in projections(b=8))
        single = c_simclr_loss(h1, h2, math.inf, 10.0, 0.0, candidates, gather=False).loss
        single.backward()
        assert 0.5 * (ranks[0][candidates][0] + ranks[1][candidates][0]).item() == pytest.approx(
            single.item(), rel=1e-10
        )
        for rank in range(2):  # each rank's gradient covers every rank's loss; DDP divides by the world size
            torch.testing.assert_close(ranks[rank][candidates][1] / 2, h1.grad[4 * rank : 4 * rank + 4])
            torch.testing.assert_close(ranks[rank][candidates][2] / 2, h2.grad[4 * rank : 4 * rank + 4])


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
