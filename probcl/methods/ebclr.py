"""EBCLR (Kim & Ye 2022): contrastive learning complemented by an energy-based generative term.

Per step (Algorithm 2): project both data views; draw SGLD samples of q(v) from the replay
buffer with multi-stage proximal SGLD on the energy of Eq. 20 (against the detached
second-view projections); loss = Eq. 18 + lambda x (E(data) - E(samples)) (Eq. 14).
The paper removes BatchNorm and uses leaky ReLU (``model.norm: none, model.act: leaky_relu``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Literal

import torch

from probcl.config import AtLeast, ConfigError, NonNegative, Positive, Probability
from probcl.losses.ebclr import ebclr_loss, energy
from probcl.methods.base import METHODS, SSLMethod, StepOutput
from probcl.methods.capabilities import EnergyModel
from probcl.methods.divergence import diverged
from probcl.runtime.distributed import gather_with_grad, world_size
from probcl.samplers.sgld import MSGLDConfig, MultiStageSGLD, ProposalFn, ReplayBuffer

BUFFER_KEY = "ebclr_replay_buffer"


@dataclass
class EBCLRParams:
    temperature: Annotated[float, Positive] = 0.1  # tau of Eq. 6 (on squared distances of unit vectors)
    lam: Annotated[float, NonNegative] = 0.1  # lambda of Eq. 11 (section 4.3)
    proj_norm_weight: Annotated[float, NonNegative] = (
        0.0  # lambda1 of the authors' code (1e-3): sum of squared unnormalized projections
    )
    others: Literal["2n-1", "n"] = "2n-1"  # candidates of Eq. 18: the 2N-1 other views, or the N second views
    sgld: MSGLDConfig = field(default_factory=MSGLDConfig)  # T, alpha, delta, sigma_min/max, K
    buffer_size: Annotated[int, AtLeast(1)] = 50000  # replay buffer entries (split across ranks under DDP)
    reinit_prob: Annotated[float, Probability] = 0.2  # rho: paper 0.2; authors' configs 0.4 MNIST, 0.6 FMNIST
    # q0 of re-initialised chains: a view of a random training image (the authors' q0 = p(v)), a view of a random
    # image of this batch (whose second views are the energy's reference), or uniform pixels
    proposal: Literal["train", "batch", "uniform"] = "train"
    gather_distributed: bool = True  # negatives and energy references from all ranks under DDP
    max_grad_norm: Annotated[float, NonNegative] = (
        1.0e4  # stop when the parameter-gradient norm exceeds this (0 = never)
    )

    def __post_init__(self) -> None:
        s = self.sgld
        if s.sigma_max < s.sigma_min:
            raise ConfigError(f"method_args.sgld.sigma_max ({s.sigma_max}) must be >= sigma_min ({s.sigma_min})")


@METHODS.register("ebclr")
class EBCLR(EnergyModel, SSLMethod[EBCLRParams]):
    """Discriminative term (Eq. 18) + lambda x generative EBM term (Eq. 13-14, energy Eq. 20) with MSGLD."""

    divergence_hint = (
        "lower method_args.sgld.step_size (alpha), tighten method_args.sgld.clamp (delta), "
        "or lower method_args.lam (lambda) / optim.lr"
    )

    def build(self) -> None:
        super().build()
        self.sampler = MultiStageSGLD(self.hp.sgld, self._new_buffer(self.hp.buffer_size))

    def _new_buffer(self, capacity: int) -> ReplayBuffer:
        info = self.data_info
        return ReplayBuffer(capacity, self.hp.reinit_prob, (info.channels, info.image_size, info.image_size))

    def setup(self, stage: str) -> None:
        if world_size() > 1:  # one buffer per rank, holding its share of the entries
            self.sampler.buffer = self._new_buffer(math.ceil(self.hp.buffer_size / world_size()))

    def energy_reference(self, views: torch.Tensor) -> torch.Tensor:
        """Projections (M, d) of normalized second views v'_m: the reference of Eq. 20."""
        return self.projector(self.backbone(views))

    def image_energy(self, images: torch.Tensor, z_ref: torch.Tensor) -> torch.Tensor:
        """Energy of Eq. 20 of normalized network inputs given reference projections (M, d)."""
        return energy(self.projector(self.backbone(images)), z_ref, self.hp.temperature)

    def sgld_settings(self) -> MSGLDConfig:
        """The multi-stage SGLD settings of ``method_args.sgld`` (Eq. 21-22)."""
        return self.hp.sgld

    def _proposal_fn(self, images: torch.Tensor) -> ProposalFn:
        """q0 for re-initialised chains (``method_args.proposal``): first views of random training images (drawn
        with replacement from :meth:`use_training_data`'s set), of random images of this batch, or uniform pixels."""
        low, high = self.normalizer.bounds()
        info = self.data_info
        shape = (info.channels, info.image_size, info.image_size)
        train = self.training_data
        if self.hp.proposal == "train" and train is None:
            raise ConfigError(
                "ebclr: method_args.proposal=train draws re-initialised SGLD chains from the training set, which "
                "this model was not given (model.use_training_data(dataset)); or use proposal=batch"
            )

        def draw(n: int) -> torch.Tensor:
            if self.hp.proposal == "uniform":
                return low + (high - low) * torch.rand((n, *shape), device=images.device)
            if train is not None and self.hp.proposal == "train":
                drawn = train.subset(torch.randint(len(train), (n,))).to_memory().images.to(images.device)
            else:
                drawn = images[torch.randint(len(images), (n,), device=images.device)]
            return self.views.view(drawn, 0)

        return draw

    def step(self, view1, view2, batch) -> StepOutput:
        hp = self.hp
        h1, h2 = self.backbone(view1), self.backbone(view2)
        z1, z2 = self.projector(h1), self.projector(h2)
        if hp.lam == 0:
            out = ebclr_loss(z1, z2, None, z2, hp.temperature, 0.0, hp.others, hp.gather_distributed, 0.0)
            return StepOutput(out.total, h1, {"disc_loss": out.discriminative.detach()})
        z_ref = gather_with_grad(z2) if hp.gather_distributed else z2
        reference = z_ref.detach()
        trace = self.sampler.sample(
            lambda v: self.image_energy(v, reference),
            len(view1),
            self._proposal_fn(batch[0]),
            view1.device,
            self.normalizer.bounds(),
        )
        if not (math.isfinite(trace.max_grad_norm) and torch.isfinite(trace.samples).all()):
            self._diverged(
                f"SGLD input gradients became {trace.max_grad_norm}",
                "lower method_args.sgld.step_size (alpha) or method_args.sgld.clamp (delta)",
            )
        z_samples = self.projector(self.backbone(trace.samples))
        out = ebclr_loss(
            z1, z2, z_samples, z_ref, hp.temperature, hp.lam, hp.others, hp.gather_distributed, hp.proj_norm_weight
        )
        if not (torch.isfinite(out.energy_data) and torch.isfinite(out.energy_samples)):
            self._diverged(
                f"energies became {out.energy_data.item()} (data) / {out.energy_samples.item()} (samples)",
                self.divergence_hint,
            )
        logs = {
            "disc_loss": out.discriminative.detach(),
            "gen_loss": out.generative.detach(),
            "energy_data": out.energy_data,
            "energy_samples": out.energy_samples,
            "sgld_grad_norm": torch.tensor(trace.max_grad_norm),
        }
        return StepOutput(out.total, h1, logs)

    def on_before_optimizer_step(self, optimizer) -> None:
        """Stop before an exploding update is applied (EBMs diverge; Yang & Ji 2021)."""
        grads = [p.grad for _, p in self.trainable_named_parameters() if p.grad is not None]
        if not grads:
            return
        norm = torch.nn.utils.get_total_norm(grads).item()
        self.log("train/grad_norm", norm, batch_size=self.cfg.train.batch_size)
        if not math.isfinite(norm) or (self.hp.max_grad_norm > 0 and norm > self.hp.max_grad_norm):
            self._diverged(
                f"the parameter-gradient norm reached {norm:.3g} (limit method_args.max_grad_norm="
                f"{self.hp.max_grad_norm:g})",
                self.divergence_hint,
            )

    def _diverged(self, what: str, fix: str) -> None:
        raise diverged(self.cfg.run_dir, f"ebclr diverged at step {self.global_step}: {what}", fix)

    # ----------------------------------------------------------------- replay buffer in checkpoints
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint[BUFFER_KEY] = self.sampler.buffer.state_dict()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        if BUFFER_KEY in checkpoint:
            self.sampler.buffer.load_state_dict(checkpoint[BUFFER_KEY])
