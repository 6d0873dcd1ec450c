"""Conditional Entropy Bottleneck pieces (Fischer 2020; CEB paper Sec. 2, appendix H).

The variational CEB objective (Eq. 4) for a forward encoder e(z|x), a backward encoder
b(z|y) and a decoder d(y|z) is, per sample,

    beta * (log e(z|x) - log b(z|y)) - log d(y|z),      z ~ e(z|x),

where the first bracket is a one-sample upper bound on the residual information
I(X;Z|Y). With the CatGen decoder (Eq. 5-6) d(y|z) = b(z|y) / sum_k b(z|y_k) over K
candidates, -log d(y|z) = H(Y|Z) bound and I(Y;Z) >= log K - H. C-SimCLR (Figure 5)
applies this in both directions with vMF e (kappa_e) and b (kappa_b) whose mean
directions are the normalized projections of the two views.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from probcl.distributions.vmf import VonMisesFisher, vmf_constants
from probcl.errors import ConfigError
from probcl.runtime.distributed import gather_batch
from probcl.runtime.precision import at_least_float32, float32

Candidates = Literal["cross-view", "both-views"]
CANDIDATES: tuple[str, ...] = ("cross-view", "both-views")


@dataclass
class CEBTerms:
    """A CEB loss and the batch means of its two information terms (nats)."""

    loss: torch.Tensor
    residual: torch.Tensor | None  # I(X;Z|Y) upper bound; None in the deterministic limit kappa_e = inf
    information: torch.Tensor  # I(Y;Z) lower bound (log K - CatGen cross-entropy)


def residual_information(
    e: torch.distributions.Distribution, b: torch.distributions.Distribution, z: torch.Tensor
) -> torch.Tensor:
    """log e(z|x) - log b(z|y), per sample: the one-sample bound on I(X;Z|Y) (Eq. 4)."""
    return e.log_prob(z) - b.log_prob(z)


def vmf_log_prob_matrix(z: torch.Tensor, locs: torch.Tensor, concentration: float) -> torch.Tensor:
    """log vMF(z_i; locs_k, kappa) for all pairs, shape (len(z), len(locs)) (a matmul, not a broadcast)."""
    return vmf_constants(z.shape[-1], float(concentration))[0] + concentration * (z @ locs.T)


def catgen_information(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-sample I(Y;Z) bound log K - (-log d(y|z)) with the CatGen decoder softmax(logits) (Eq. 5-6).

    K counts each row's candidates (entries that are not -inf).
    """
    num_candidates = torch.isfinite(logits).sum(1).to(logits.dtype)
    return torch.log(num_candidates) - F.cross_entropy(logits, targets, reduction="none")


def _sample_encoder(r_x: torch.Tensor, kappa_e: float) -> tuple[torch.Tensor, VonMisesFisher | None]:
    if math.isinf(kappa_e):  # e = delta(r_x): the SimCLR limit (Eq. 9)
        return r_x, None
    e = VonMisesFisher(r_x, kappa_e)
    return e.rsample(), e


def _c_simclr_direction(
    r_x: torch.Tensor,
    r_y: torch.Tensor,
    all_x: torch.Tensor,
    all_y: torch.Tensor,
    targets: torch.Tensor,
    kappa_e: float,
    kappa_b: float,
    beta: float,
    candidates: str,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """One direction x -> y of Figure 5: per-sample (loss, residual, information)."""
    z, e = _sample_encoder(r_x, kappa_e)
    logits = vmf_log_prob_matrix(z, all_y, kappa_b)  # log b(z | y_k), the B cross-view candidates
    if candidates == "both-views":  # authors' code: also b(z | x_k), k != i -> 2B - 1 candidates
        same = vmf_log_prob_matrix(z, all_x, kappa_b)
        same = same.index_put(
            (torch.arange(len(z), device=z.device), targets),
            torch.tensor(float("-inf"), dtype=same.dtype, device=same.device),
        )
        logits = torch.cat([logits, same], dim=1)
    information = catgen_information(logits, targets)
    if e is None:
        return -information, None, information
    residual = residual_information(e, VonMisesFisher(r_y, kappa_b), z)
    return beta * residual - information, residual, information


def check_c_simclr_args(kappa_e: float, beta: float, candidates: str) -> None:
    """The arguments' one consistency rule and the CatGen candidate sets (the Params validate with this too)."""
    if candidates not in CANDIDATES:
        raise ConfigError(f"method_args.candidates must be one of {', '.join(CANDIDATES)}, got {candidates!r}")
    if math.isinf(kappa_e) and beta != 0:
        raise ConfigError(
            "method_args.kappa_e = .inf (deterministic z) needs method_args.beta = 0: "
            "with a point-mass encoder the residual information I(X;Z|Y) is infinite"
        )


def c_simclr_loss(
    h1: torch.Tensor,
    h2: torch.Tensor,
    kappa_e: float,
    kappa_b: float,
    beta: float,
    candidates: Candidates,
    gather: bool,
) -> CEBTerms:
    """Bidirectional C-SimCLR loss (Eq. 12, Figure 5): the sum of both directions, each a batch mean.

    ``h1``, ``h2``: projections of the two views (normalized here). ``candidates``: the CatGen
    decoder's candidates for each z, either the B other-view projections of the (global) batch
    ("cross-view", Eq. 5 as in the paper) or those plus the B-1 same-view ones ("both-views",
    the authors' code, 2B-1 candidates). ``kappa_e = inf`` is the deterministic SimCLR limit
    z = r_x (Eq. 9), valid only with beta = 0. Under DDP the candidates are gathered from all
    ranks with gradient, as in NT-Xent. Computed in float32 under any autocast: vMF samples at kappa_e = 1024 lie
    within ~0.03 rad of their mean and log-densities reach hundreds of nats (bf16 would round both).
    """
    check_c_simclr_args(kappa_e, beta, candidates)
    with float32(h1.device):
        r1, r2 = F.normalize(at_least_float32(h1), dim=1), F.normalize(at_least_float32(h2), dim=1)
        (all1, all2), offset = gather_batch(r1, r2, gather=gather)
        targets = torch.arange(len(r1), device=r1.device) + offset
        loss12, res12, info12 = _c_simclr_direction(r1, r2, all1, all2, targets, kappa_e, kappa_b, beta, candidates)
        loss21, res21, info21 = _c_simclr_direction(r2, r1, all2, all1, targets, kappa_e, kappa_b, beta, candidates)
    residual = None if res12 is None or res21 is None else 0.5 * (res12.mean() + res21.mean())
    # Figure 5 sums the two directions (as SimCLR's reference sums loss_a + loss_b); the logged terms are means.
    return CEBTerms(loss12.mean() + loss21.mean(), residual, 0.5 * (info12.mean() + info21.mean()))
