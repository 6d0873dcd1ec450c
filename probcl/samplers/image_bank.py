"""VEM-Image: persistent image particles moved by Langevin dynamics in input space (VEM Eq. 8).

Each training step runs eta steps of

    x <- clamp(x + alpha_i grad_x log p(x) + sigma_i N(0, I))                  (Eq. 8)

on K particles, with log p(x) = log sum_n exp(f(x) . q_n / t) estimated from the batch's
queries, and the step sizes and noise of :func:`probcl.samplers.feature_space.langevin_schedule`.
Every step needs a forward and a backward pass through the encoder for all K particles: this
is the expensive reference VEM compares its feature-space samplers against (Appendix E.5).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from probcl.runtime.distributed import gather_no_grad
from probcl.samplers.feature_space import FillCounter, Schedule, langevin_schedule
from probcl.samplers.sgld import proximal_sgld

LogDensityFn = Callable[[torch.Tensor], torch.Tensor]  # (K, C, H, W) -> (K,) log p up to a constant


class ImageBank(nn.Module):
    """K image particles in the network's (normalized) input space, identical on every DDP rank.

    Particles start as uniform noise over ``bounds`` and are overwritten, in order, by the
    gathered first views of the first training steps (after their own step); each step's chains then start where
    the last step's ended. Noise comes from the global generator seeded with a per-step seed
    inside a forked RNG state, so all ranks draw the same noise and training randomness is
    left untouched.
    """

    def __init__(
        self,
        size: int,
        shape: tuple[int, ...],
        bounds: tuple[torch.Tensor, torch.Tensor],
        steps: int = 10,
        step_size: float = 1.0,
        noise_scale: float = 0.01,
        schedule: Schedule = "decreasing",
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.particles: torch.Tensor
        self.filled: torch.Tensor
        self.steps, self.step_size, self.noise_scale, self.schedule = steps, step_size, noise_scale, schedule
        low, high = bounds
        uniform = torch.rand((size, *shape), generator=torch.Generator().manual_seed(seed))
        self.register_buffer("particles", low + (high - low) * uniform)
        self.register_buffer("filled", torch.zeros((), dtype=torch.long))
        self.fill = FillCounter()

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        self.fill.forget()  # the checkpoint's count replaces the one mirrored on the host

    @torch.no_grad()
    def update(
        self, images: torch.Tensor, log_density: LogDensityFn, bounds: tuple[torch.Tensor, torch.Tensor], seed: int
    ) -> torch.Tensor:
        """Run Eq. 8 and return the particles (K, C, H, W); then write this step's ``images`` (all ranks)
        into still-unfilled particles, for the next steps.

        ``log_density`` must give each particle's log p (gradients flow to the input only);
        ``seed`` must be equal on all ranks and differ between steps.
        """
        x = self.particles.clone()
        devices = (
            [x.device.index if x.device.index is not None else torch.cuda.current_device()]
            if x.device.type == "cuda"
            else []
        )
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            for alpha, sigma in langevin_schedule(self.steps, self.step_size, self.noise_scale, self.schedule):
                x = proximal_sgld(lambda v: -log_density(v), x, 1, alpha, math.inf, sigma, bounds).samples
        self.particles.copy_(x)
        self.fill.fill_(self.particles, self.filled, gather_no_grad(images.detach().contiguous()))
        return x
