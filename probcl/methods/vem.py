"""VEM (Du et al. 2022): contrastive learning against negatives sampled from the model's own density.

Each step (Algorithm 1/2 of the paper's Appendix C):

    q = n(g(f(x_q))), k = n(g(f(x_k)))                          (lines 6-7)
    negatives <- sampler(negatives, q)  (no gradient)          (lines 8-15)
    loss = CE([q.k, q B^T] / tau, label 0)                     (lines 16-20)

``base: simclr``: the key is the other view's projection by the same network (with
gradient). ``base: moco``: the key comes from MoCo's momentum encoder (no gradient), which
is updated after every optimiser step; VEM's sampler replaces MoCo's queue.

* ``vem-langevin`` / ``vem-svgd``: a persistent feature bank moved by Langevin or SVGD
  updates that need no pass through the encoder (:mod:`probcl.samplers.feature_space`).
* ``vem-image``: K persistent image particles moved by Langevin dynamics in input space
  (Eq. 8), each step a forward and backward pass through the encoder
  (:mod:`probcl.samplers.image_bank`); their projections are the negatives.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Literal, Optional

import torch
import torch.nn.functional as F
from torch import nn

from probcl.config import ConfigError, check_positive
from probcl.core.distributed import gather_no_grad
from probcl.losses.info_nce import queue_logits
from probcl.methods.base import METHODS, SSLMethod, StepOutput
from probcl.methods.moco import MoCo
from probcl.models.ema import momentum_copy
from probcl.models.heads import mlp
from probcl.samplers.feature_space import BankSampler, FeatureBank
from probcl.samplers.image_bank import ImageBank


@dataclass
class VEMParams:
    """Hyper-parameters shared by the VEM variants (Appendix D and I)."""

    base: Literal["simclr", "moco"] = "simclr"
    temperature: float = 0.12  # tau of the backbone loss
    bank_temperature: float = 0.02  # t of the sampler's softmax
    steps: int = 10  # eta, sampling steps per training step
    step_size: float = 1.0  # alpha, the bank learning rate (1.0 or 0.5)
    schedule: Literal["decreasing", "fixed"] = "decreasing"  # alpha / i, or alpha (Appendix I)
    momentum: float = 0.99  # base moco: key-encoder EMA
    shuffle_bn: bool = True  # base moco: shuffle the key batch across ranks under DDP
    proj_batch_norm: bool = False  # base moco: MoCo v2's head has no BatchNorm

    def __post_init__(self) -> None:
        check_positive("method_args.temperature", self.temperature, strict=True)
        check_positive("method_args.bank_temperature", self.bank_temperature, strict=True)
        check_positive("method_args.steps", self.steps, minimum=1)
        check_positive("method_args.step_size", self.step_size, strict=True)
        if not 0.0 <= self.momentum < 1.0:
            raise ConfigError(f"method_args.momentum must be in [0, 1), got {self.momentum}")


@dataclass
class VEMLangevinParams(VEMParams):
    bank_size: int = 4096  # M
    noise_scale: Optional[float] = None  # eps; None = sqrt(bank_temperature / global batch)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("method_args.bank_size", self.bank_size, minimum=1)
        if self.noise_scale is not None:
            check_positive("method_args.noise_scale", self.noise_scale)


@dataclass
class VEMSVGDParams(VEMParams):
    bank_size: int = 4096  # M
    kernel: Literal["linear", "rbf"] = "linear"  # Alg. 2, or the RBF kernel of Eq. 9
    bandwidth: Optional[float] = None  # RBF h; None = median heuristic

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("method_args.bank_size", self.bank_size, minimum=1)
        if self.bandwidth is not None:
            check_positive("method_args.bandwidth", self.bandwidth, strict=True)


@dataclass
class VEMImageParams(VEMParams):
    """``step_size`` and ``noise_scale`` act on normalized pixels; the defaults (alpha 1, eps 0.01)
    are JEM's image-space SGLD settings, which VEM's Appendix I cites."""

    particles: int = 128  # K image particles (Appendix E.5)
    noise_scale: float = 0.01  # eps in input space

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("method_args.particles", self.particles, minimum=1)
        check_positive("method_args.noise_scale", self.noise_scale)


@contextmanager
def _eval_mode(*modules: nn.Module) -> Iterator[None]:
    """Run ``modules`` in eval mode (BatchNorm uses and keeps its running statistics), then restore."""
    modes = [m.training for m in modules]
    for m in modules:
        m.eval()
    try:
        yield
    finally:
        for m, mode in zip(modules, modes):
            m.train(mode)


class VEM(MoCo):
    """Shared VEM step; subclasses create their sampler in :meth:`build_sampler` and implement
    :meth:`sample_negatives`. Reuses MoCo's query/key encoders and loss (MoCo Eq. 1 = Alg. 1 l. 16-20)."""

    Params = VEMParams
    divergence_hint = "lower optim.lr or method_args.step_size, or raise method_args.temperature"

    def build(self) -> None:
        mc = self.cfg.model
        if self.hp.base == "moco":
            self.projector = mlp(self.feature_dim, mc.proj_hidden, mc.proj_out, mc.proj_layers,
                                 batch_norm=self.hp.proj_batch_norm, act=mc.act)
            self.key_backbone = momentum_copy(self.backbone)
            self.key_projector = momentum_copy(self.projector)
        else:
            SSLMethod.build(self)  # SimCLR's projection head
        self.build_sampler()

    def build_sampler(self) -> None:
        raise NotImplementedError

    def sample_negatives(self, queries: torch.Tensor, view1: torch.Tensor) -> torch.Tensor:
        """Move the sampler with this step's detached, normalized ``queries``; return the negatives (M, k)."""
        raise NotImplementedError

    def sampler_seed(self) -> int:
        """A seed equal on all ranks and different at every step (resumes reproduce it)."""
        return self.cfg.train.seed * 1_000_003 + self.global_step

    def step(self, view1, view2, batch) -> StepOutput:
        h1, q = self.query(view1)
        if self.hp.base == "moco":
            k = self.keys(view2)
        else:
            k = F.normalize(self.projector(self.backbone(view2)), dim=1)
        negatives = self.sample_negatives(q.detach(), view1)
        loss = self.contrastive_loss(q, k, negatives)
        with torch.no_grad():
            logits = queue_logits(q, k, negatives)
            logs = {"key_top1": (logits.argmax(dim=1) == 0).float().mean(),
                    "negative_max_cos": logits[:, 1:].max(dim=1).values.mean()}
        return StepOutput(loss, h1, logs)

    def after_optimizer_step(self) -> None:
        if self.hp.base == "moco":
            super().after_optimizer_step()  # key-encoder EMA


class _FeatureVEM(VEM):
    """VEM with a feature-space memory bank (Algorithms 1 and 2)."""

    def bank_sampler(self) -> BankSampler:
        raise NotImplementedError

    def build_sampler(self) -> None:
        self.memory = FeatureBank(self.hp.bank_size, self.cfg.model.proj_out, self.bank_sampler(),
                                  seed=self.cfg.train.seed)

    def sample_negatives(self, queries: torch.Tensor, view1: torch.Tensor) -> torch.Tensor:
        return self.memory.update(queries, self.sampler_seed()).negatives


@METHODS.register("vem-langevin")
class VEMLangevin(_FeatureVEM):
    """VEM-Langevin (Algorithm 1)."""

    Params = VEMLangevinParams

    def bank_sampler(self) -> BankSampler:
        hp = self.hp
        return BankSampler("langevin", hp.bank_temperature, hp.steps, hp.step_size, hp.schedule, hp.noise_scale)


@METHODS.register("vem-svgd")
class VEMSVGD(_FeatureVEM):
    """VEM-SVGD (Algorithm 2, linear kernel; ``kernel: rbf`` for Eq. 9)."""

    Params = VEMSVGDParams

    def bank_sampler(self) -> BankSampler:
        hp = self.hp
        return BankSampler("svgd", hp.bank_temperature, hp.steps, hp.step_size, hp.schedule,
                           kernel=hp.kernel, bandwidth=hp.bandwidth)


@METHODS.register("vem-image")
class VEMImage(VEM):
    """VEM-Image: Langevin on K image particles (Eq. 8); negatives are their projections."""

    Params = VEMImageParams

    def build_sampler(self) -> None:
        info, hp = self.data_info, self.hp
        self.image_bank = ImageBank(hp.particles, (info.channels, info.image_size, info.image_size),
                                    self.normalizer.bounds(), hp.steps, hp.step_size, hp.noise_scale,
                                    hp.schedule, seed=self.cfg.train.seed)

    def _project(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.projector(self.backbone(x)), dim=1)

    def sample_negatives(self, queries: torch.Tensor, view1: torch.Tensor) -> torch.Tensor:
        queries = gather_no_grad(queries)
        t = self.hp.bank_temperature

        def log_density(x: torch.Tensor) -> torch.Tensor:  # log sum_n exp(f(x) . q_n / t), Eq. 8
            return torch.logsumexp(self._project(x) @ queries.T / t, dim=1)

        with _eval_mode(self.backbone, self.projector):
            particles = self.image_bank.update(view1, log_density, self.normalizer.bounds(), self.sampler_seed())
            with torch.no_grad():
                return self._project(particles)
