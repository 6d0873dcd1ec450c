"""C-SimCLR's loss against Eq. 7, NT-Xent and the Figure 5 pseudocode, the residual information against the
vMF KL (scipy), and its candidates gathered across 2 gloo processes against one process."""

import math

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from probcl.distributions.vmf import VonMisesFisher
from probcl.losses.ceb import c_simclr_loss, residual_information
from probcl.losses.nt_xent import nt_xent_loss
from tests.losses.ceb_reference import a_n, log_c, unit


def projections(b: int = 12, d: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    h1 = torch.randn(b, d, generator=g, dtype=torch.float64)
    return h1, h1 + 0.7 * torch.randn(b, d, generator=g, dtype=torch.float64)


def infonce_eq7(rx: np.ndarray, ry: np.ndarray, tau: float) -> float:
    """Eq. 7 averaged over the batch: -log exp(ry_i.rx_i / tau) / sum_k exp(ry_k.rx_i / tau)."""
    losses = []
    for i in range(len(rx)):
        num = math.exp(ry[i] @ rx[i] / tau)
        den = sum(math.exp(ry[k] @ rx[i] / tau) for k in range(len(ry)))
        losses.append(-math.log(num / den))
    return float(np.mean(losses))


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
