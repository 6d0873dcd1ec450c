"""The EBCLR objective (Kim & Ye 2022): a contrastive term plus an energy-based generative term.

The joint model of two views is q(v, v') ~ exp(-||z - z'||^2 / tau) on L2-normalized
projections (Eq. 6). Its log-likelihood splits into (Eq. 10-11)

    L = E_p[log q(v' | v)] + lambda * E_p[log q(v)]

* discriminative term, Eq. 18: a softmax over the other views of the batch; with the
  2N - 1 others ({v_k} u {v'_k} - {v_n}) it is NT-Xent on -||z - z'||^2 / tau, with the
  N others ({v'_m}) an InfoNCE across the two views. Both views serve as anchors; the
  constant log N' of Eq. 18 is dropped (it has no gradient).
* generative term, Eq. 13-14: an EBM with energy (Eq. 20)

      E(v; {v'_m}) = -log sum_m exp(-||z - z'_m||^2 / tau),

  whose gradient pushes the energy down on data views and up on samples of q(v) (SGLD).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from probcl.losses.nt_xent import nt_xent_logits
from probcl.runtime.precision import at_least_float32, float32

Others = Literal["2n-1", "n"]


def neg_sq_distance_logits(z: torch.Tensor, z_ref: torch.Tensor, temperature: float) -> torch.Tensor:
    """-||z_i - z'_m||^2 / tau between L2-normalized rows of ``z`` (B, d) and ``z_ref`` (M, d) -> (B, M)."""
    z, z_ref = F.normalize(z, dim=1), F.normalize(z_ref, dim=1)
    return (2 * z @ z_ref.T - 2) / temperature  # ||a - b||^2 = 2 - 2 a.b for unit vectors


def energy(z: torch.Tensor, z_ref: torch.Tensor, temperature: float) -> torch.Tensor:
    """Energy of Eq. 20 for each row of ``z`` (B,) given the reference projections ``z_ref`` (M, d).

    Always in float32 (under bf16 autocast too): the generative term is a difference of energies of tens of
    nats (Eq. 13), which bf16's 8-bit mantissa would round by tenths."""
    with float32(z.device):
        logits = neg_sq_distance_logits(at_least_float32(z), at_least_float32(z_ref), temperature)
        return -torch.logsumexp(logits, dim=1)


def discriminative_loss(
    z1: torch.Tensor, z2: torch.Tensor, temperature: float, others: Others, gather: bool
) -> torch.Tensor:
    """-mean log q(v' | v) of Eq. 18 over both views as anchors (up to the constant log N').

    Under DDP the candidates come from all ranks (with gradient), as in NT-Xent.
    """
    cos, pos_idx = nt_xent_logits(z1, z2, gather)  # (2n, 2N_global), self-pairs = -inf
    logits = (2 * cos - 2) / temperature  # -||z - z'||^2 / tau
    if others == "n":  # candidates: the other view of every pair only (Eq. 17's form)
        n, total = z1.shape[0], cos.shape[1] // 2
        logits = torch.cat([logits[:n, total:], logits[n:, :total]])
        pos_idx = pos_idx % total
    return F.cross_entropy(logits, pos_idx)


@dataclass
class EBCLRLoss:
    """The total loss and its parts (energies are batch means)."""

    total: torch.Tensor
    discriminative: torch.Tensor
    generative: torch.Tensor
    energy_data: torch.Tensor
    energy_samples: torch.Tensor


def ebclr_loss(
    z1: torch.Tensor,
    z2: torch.Tensor,
    z_samples: torch.Tensor | None,
    z_ref: torch.Tensor,
    temperature: float,
    lam: float,
    others: Others,
    gather: bool,
    proj_norm_weight: float,
) -> EBCLRLoss:
    """Minimise -L of Eq. 11: discriminative + lambda x generative (Eq. 14).

    ``z1``/``z2`` are the (unnormalized) projections of the two data views, ``z_samples``
    those of the SGLD samples (None when lambda = 0), ``z_ref`` the second-view projections
    that define the energy (the global batch under DDP). ``proj_norm_weight`` adds the
    authors' code's regulariser lambda1 x (sum ||z1||^2 + sum ||z_samples||^2) over the batch,
    inside the generative term.
    """
    disc = discriminative_loss(z1, z2, temperature, others, gather)
    if z_samples is None:
        zero = disc.new_zeros(())
        return EBCLRLoss(disc, disc, zero, zero, zero)
    e_data = energy(z1, z_ref, temperature).mean()
    e_samples = energy(z_samples, z_ref, temperature).mean()
    gen = e_data - e_samples  # Eq. 13: energy down on p(v), up on q(v)
    if proj_norm_weight > 0:
        gen = gen + proj_norm_weight * (z1.square().sum() + z_samples.square().sum())
    return EBCLRLoss(disc + lam * gen, disc, gen, e_data.detach(), e_samples.detach())
