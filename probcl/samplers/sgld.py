"""Proximal, multi-stage SGLD with a replay buffer (EBCLR section 3.3, Algorithm 1).

* proximal SGLD, Eq. 21: v <- v - alpha * clamp(grad_v E(v), -delta, delta) + eps, eps ~ N(0, sigma^2),
  T steps; optionally (``pixel_clamp``, on by default) iterates are clamped to the valid pixel
  range after every step. The authors' code does not clamp them (the presets with their settings turn it off).
* multi-stage SGLD, Eq. 22: sigma = sigma_min + (sigma_max - sigma_min) * [1 - kappa / K]_+,
  with kappa the number of times a buffer entry has started a chain.
* replay buffer: chains start from past samples; each one is re-initialised with probability
  rho from a proposal q0 (views of random training images by default: q0 = p(v)), and then has kappa = 0.

The buffer lives on the CPU, one per process (rank); its entries start empty and are
filled from the proposal the first time they are drawn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import torch

from probcl.config import AtLeast, NonNegative, Positive
from probcl.runtime.distributed import gather_no_grad, rank, world_size
from probcl.runtime.precision import at_least_float32

EnergyFn = Callable[[torch.Tensor], torch.Tensor]  # (B, C, H, W) -> (B,) energies
ProposalFn = Callable[[int], torch.Tensor]  # n -> (n, C, H, W) initial samples


def msgld_sigma(counts: torch.Tensor, sigma_min: float, sigma_max: float, decay_uses: float) -> torch.Tensor:
    """Noise standard deviation of Eq. 22 for use counts ``counts`` (kappa), with K = ``decay_uses``."""
    return sigma_min + (sigma_max - sigma_min) * (1 - counts.float() / decay_uses).clamp_min(0)


@dataclass
class SGLDTrace:
    """What a chain run returns: the samples and the largest per-sample input-gradient norm seen."""

    samples: torch.Tensor
    max_grad_norm: float


def proximal_sgld(
    energy_fn: EnergyFn,
    init: torch.Tensor,
    steps: int,
    step_size: float,
    clamp: float,
    sigma: torch.Tensor | float,
    bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> SGLDTrace:
    """Run Eq. 21 for ``steps`` steps from ``init``; ``sigma`` is a float or per-sample (B,) tensor.

    Only the input receives gradients (model parameters are left untouched). ``bounds``
    (low, high), broadcastable to the samples, clamps every iterate to the valid range.
    The chain (iterates, noise, the update) is float32 whatever the training precision: steps of
    alpha * delta = 0.05 and noise of sigma = 0.01 on pixels of magnitude ~1 are below bf16's resolution
    there (2^-7); ``energy_fn``'s network pass runs in the training precision, its gradient arrives in float32.
    """
    v = at_least_float32(init.detach()).clone()
    if isinstance(sigma, torch.Tensor):
        sigma = sigma.to(v).view(-1, *([1] * (v.dim() - 1)))
    max_norm = torch.zeros((), device=v.device, dtype=v.dtype)
    with torch.enable_grad():
        for _ in range(steps):
            v.requires_grad_(True)
            (grad,) = torch.autograd.grad(energy_fn(v).sum(), v)
            max_norm = torch.maximum(max_norm, grad.flatten(1).norm(dim=1).max())
            v = v.detach() - step_size * grad.clamp(-clamp, clamp) + sigma * torch.randn_like(v)  # Eq. 21
            if bounds is not None:
                v = torch.clamp(v, bounds[0], bounds[1])
    return SGLDTrace(v.detach(), max_norm.item())  # one device sync per chain run


class ReplayBuffer:
    """Past SGLD samples with per-entry use counts kappa (-1 = never filled), on the CPU.

    Under DDP every rank holds its own buffer; ``state_dict`` gathers all of them (call it
    on every rank) and ``load_state_dict`` hands each rank its share again.
    """

    def __init__(self, capacity: int, reinit_prob: float, sample_shape: tuple[int, ...]) -> None:
        self.capacity = capacity
        self.reinit_prob = reinit_prob
        self.sample_shape = tuple(sample_shape)
        self.samples: torch.Tensor | None = None  # (capacity, *sample_shape), allocated on first use
        self.counts = torch.full((capacity,), -1, dtype=torch.long)

    def _allocated(self) -> torch.Tensor:
        if self.samples is None:
            self.samples = torch.zeros((self.capacity, *self.sample_shape))
        return self.samples

    def draw(
        self, n: int, proposal: ProposalFn, device: torch.device | str = "cpu"
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pick ``n`` entries (with replacement); re-initialise each with probability rho (and empty ones).

        Returns (indices, initial samples on ``device``, their use counts kappa before this use,
        re-init mask). The stored counts of the drawn entries become kappa + 1.
        """
        idx = torch.randint(self.capacity, (n,))
        reinit = (torch.rand(n) < self.reinit_prob) | (self.counts[idx] < 0)
        init = self._allocated()[idx].to(device)
        if reinit.any():
            init[reinit.to(device)] = proposal(int(reinit.sum())).to(init.dtype)
        counts = torch.where(reinit, 0, self.counts[idx])
        self.counts[idx] = counts + 1
        return idx, init, counts, reinit

    def write(self, idx: torch.Tensor, samples: torch.Tensor) -> None:
        """Store the chains' end points back into their entries."""
        self._allocated()[idx] = samples.detach().to("cpu", torch.float32)

    def state_dict(self) -> dict:
        """All ranks' entries, concatenated in rank order (a collective call under DDP)."""
        device = _collective_device()
        samples = gather_no_grad(self._allocated().to(device)).cpu().clone()
        counts = gather_no_grad(self.counts.to(device)).cpu().clone()
        return {"samples": samples, "counts": counts}  # a snapshot: later draws do not change it

    def load_state_dict(self, state: dict) -> None:
        """Take this rank's share of a saved buffer; entries that a smaller save lacks stay empty."""
        start = rank() * self.capacity
        samples = state["samples"][start : start + self.capacity]
        counts = state["counts"][start : start + self.capacity]
        if tuple(samples.shape[1:]) != self.sample_shape:
            raise ValueError(
                f"saved replay buffer holds samples of shape {tuple(samples.shape[1:])}, "
                f"this model draws {self.sample_shape}"
            )
        self.samples = None
        self._allocated()[: len(samples)] = samples
        self.counts = torch.full((self.capacity,), -1, dtype=torch.long)
        self.counts[: len(counts)] = counts


def _collective_device() -> torch.device:
    """Where all_gather runs: CUDA for NCCL, else CPU (gloo)."""
    import torch.distributed as dist

    if world_size() > 1 and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


@dataclass
class MSGLDConfig:
    """Hyper-parameters of the multi-stage sampler (EBCLR section 3.3)."""

    steps: Annotated[int, AtLeast(1)] = 10  # T
    step_size: Annotated[float, Positive] = 0.05  # alpha
    clamp: Annotated[float, Positive] = 1.0  # delta
    sigma_min: Annotated[float, NonNegative] = 0.01  # noise std of a chain used K times or more
    sigma_max: Annotated[float, NonNegative] = 0.05  # noise std of a fresh chain (decays to sigma_min over K uses)
    decay_uses: Annotated[float, Positive] = 3.0  # K
    pixel_clamp: bool = True  # clamp iterates to the valid pixel range (the authors' code does not)


class MultiStageSGLD:
    """Replay-buffer MSGLD: draw chains from the buffer, run proximal SGLD, write them back."""

    def __init__(self, config: MSGLDConfig, buffer: ReplayBuffer) -> None:
        self.config = config
        self.buffer = buffer

    def sample(
        self,
        energy_fn: EnergyFn,
        n: int,
        proposal: ProposalFn,
        device: torch.device | str = "cpu",
        bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> SGLDTrace:
        """``n`` samples of q(v) proportional to exp(-E(v)) (Algorithm 1)."""
        c = self.config
        idx, init, counts, _ = self.buffer.draw(n, proposal, device)
        sigma = msgld_sigma(counts, c.sigma_min, c.sigma_max, c.decay_uses)  # Eq. 22
        trace = proximal_sgld(energy_fn, init, c.steps, c.step_size, c.clamp, sigma, bounds if c.pixel_clamp else None)
        self.buffer.write(idx, trace.samples)
        return trace
