"""VEM (Du et al. 2022): contrastive learning against negatives sampled from the model's own density.

Each step (Algorithm 1/2 of the paper's Appendix C):

    q = n(g(f(x_q))), k = n(g(f(x_k)))                          (lines 6-7)
    negatives <- sampler(negatives, q)  (no gradient)          (lines 8-15)
    loss = CE([q.k, q B^T] / tau, label 0)                     (lines 16-20)

``base: simclr``: the key is the other view's projection by the same network (with
gradient). ``base: moco``: the key comes from a momentum key encoder with MoCo v2's head
(:class:`~probcl.methods.components.MomentumKeyEncoder`, no gradient), which follows the
trained encoder after every optimiser step; VEM's sampler replaces MoCo's queue.

* ``vem-langevin`` / ``vem-svgd``: a persistent feature bank moved by Langevin or SVGD
  updates that need no pass through the encoder (:mod:`probcl.samplers.feature_space`).
* ``vem-image``: K persistent image particles moved by Langevin dynamics in input space
  (Eq. 8), each step a forward and backward pass through the encoder
  (:mod:`probcl.samplers.image_bank`); their projections are the negatives.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Literal, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from probcl.config import AtLeast, InRange, NonNegative, Positive
from probcl.losses.info_nce import info_nce_loss, queue_logits
from probcl.methods.base import METHODS, SSLMethod, StepOutput
from probcl.methods.components import (
    LEGACY_KEY_ENCODER_NAMES,
    MomentumKeyEncoder,
    MomentumKeyParams,
    moco_head,
    rename_state_keys,
)
from probcl.runtime.distributed import gather_no_grad
from probcl.samplers.feature_space import BankSampler, FeatureBank
from probcl.samplers.image_bank import ImageBank


@dataclass
class VEMParams(MomentumKeyParams):
    """Hyper-parameters shared by the VEM variants (Appendix D and I); the momentum-key settings
    (momentum, shuffle_bn, proj_batch_norm) apply with ``base: moco``."""

    base: Literal["simclr", "moco"] = "simclr"  # contrastive base: SimCLR's key path or MoCo's key encoder
    temperature: Annotated[float, Positive] = 0.12  # tau of the backbone loss
    bank_temperature: Annotated[float, Positive] = 0.02  # t of the sampler's softmax
    steps: Annotated[int, AtLeast(1)] = 10  # eta, sampling steps per training step
    step_size: Annotated[float, Positive] = 1.0  # alpha, the bank learning rate (1.0 or 0.5)
    schedule: Literal["decreasing", "fixed"] = "decreasing"  # alpha / i, or alpha (Appendix I)


@dataclass
class FeatureBankParams(VEMParams):
    """A persistent bank of M feature-space negatives."""

    bank_size: Annotated[int, AtLeast(1)] = 4096  # M
    # Appendix D: the bank is trained with its own lr (step_size, 1.0 or 0.5) and momentum 0.9, the gradient
    # divided by t as in AdCo; "literal" = Alg. 1 line 13 as printed, whose bank barely moves (see BankSampler).
    bank_update: Literal["optimizer", "literal"] = "optimizer"
    bank_momentum: Annotated[float, InRange(0.0, 1.0, high_open=True)] = 0.9  # bank optimiser's momentum
    bank_lr_schedule: bool = True  # decay the bank lr with the backbone's schedule (Appendix D: cosine)
    # Which bank the loss sees. "updated" (Alg. 1, lines 8-20): the bank first moves towards this batch's queries,
    # so a row can land next to its own anchor (a self-negative). "pre-update" (AdCo's order): the loss sees the
    # bank as the previous step left it, and it then moves towards this batch's queries for the next step.
    loss_bank: Literal["updated", "pre-update"] = "updated"


@dataclass
class VEMLangevinParams(FeatureBankParams):
    """VEM-Langevin's settings. Bank momentum defaults to 0, not Appendix D's 0.9: the sampler's alpha / i steps
    restart every training step, and with momentum the Langevin noise is miscalibrated, so the bank does not
    sample p(z) (a one-query 64-d vMF target with mean cosine 0.549 gave 0.771 at full lr and 0.465 at lr x 0.1
    with momentum 0.9; 0.568 / 0.556 with momentum 0: :class:`~probcl.samplers.feature_space.BankSampler`).
    VEM-SVGD has no noise to miscalibrate and keeps 0.9."""

    bank_momentum: Annotated[float, InRange(0.0, 1.0, high_open=True)] = 0.0  # bank update momentum (0: see above)
    noise_scale: Annotated[float | None, NonNegative] = (
        None  # eps; None = sqrt(1 / N) (optimizer), sqrt(t / N) (literal)
    )


@dataclass
class VEMSVGDParams(FeatureBankParams):
    # Eq. 9's RBF kernel (median heuristic). Alg. 2's linear kernel is degenerate as printed: its +B term is
    # radial (removed by the renormalisation) and B B^T dB moves every row in one shared direction.
    kernel: Literal["linear", "rbf"] = "rbf"
    bandwidth: Annotated[float | None, Positive] = None  # RBF h; None = median heuristic


@dataclass
class VEMImageParams(VEMParams):
    """``step_size`` and ``noise_scale`` act on normalized pixels; the defaults (alpha 1, eps 0.01)
    are JEM's image-space SGLD settings, which VEM's Appendix I cites."""

    particles: Annotated[int, AtLeast(1)] = 128  # K image particles (Appendix E.5)
    noise_scale: Annotated[float, NonNegative] = 0.01  # eps in input space


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


VP = TypeVar("VP", bound=VEMParams)


class VEM(SSLMethod[VP]):
    """Shared VEM step over a base (SimCLR's or MoCo's key path); subclasses create their sampler in
    :meth:`build_sampler` and implement :meth:`sample_negatives`. The loss is MoCo's Eq. 1 = Alg. 1 l. 16-20."""

    divergence_hint = "lower optim.lr or method_args.step_size, or raise method_args.temperature"
    key_encoder: MomentumKeyEncoder | None

    def build(self) -> None:
        if self.hp.base == "moco":
            self.projector = moco_head(self.feature_dim, self.cfg.model, self.hp.proj_batch_norm)
            self.key_encoder = MomentumKeyEncoder(self.backbone, self.projector, self.hp.shuffle_bn, self.hp.bn_splits)
            self.register_load_state_dict_pre_hook(rename_state_keys(LEGACY_KEY_ENCODER_NAMES))
        else:
            super().build()  # SimCLR's projection head
            self.key_encoder = None
        self.build_sampler()

    def momentum_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        if self.key_encoder is None:
            return []
        return [(self.backbone, self.key_encoder.backbone), (self.projector, self.key_encoder.projector)]

    def momentum(self, steps_done: int) -> float:
        return self.hp.momentum

    def query(self, view: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Backbone features h and L2-normalized projection q of ``view`` (with gradient)."""
        h = self.backbone(view)
        return h, F.normalize(self.projector(h), dim=1)

    def build_sampler(self) -> None:
        raise NotImplementedError

    def sample_negatives(
        self, queries: torch.Tensor, view1: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Move the sampler with this step's detached, normalized ``queries``; return the negatives (M, k)
        and the sampler's diagnostics for ``metrics.jsonl``."""
        raise NotImplementedError

    def sampler_seed(self) -> int:
        """A seed equal on all ranks and different at every step (resumes reproduce it)."""
        return self.cfg.train.seed * 1_000_003 + self.global_step

    def step(self, view1, view2, batch) -> StepOutput:
        h1, q = self.query(view1)
        k = self.key_encoder(view2) if self.key_encoder is not None else self.query(view2)[1]
        negatives, sampler_logs = self.sample_negatives(q.detach(), view1)
        loss = info_nce_loss(q, k, negatives, self.hp.temperature)
        with torch.no_grad():
            logits = queue_logits(q, k, negatives)
            logs = {
                "key_top1": (logits.argmax(dim=1) == 0).float().mean(),
                "negative_max_cos": logits[:, 1:].max(dim=1).values.mean(),
                "negative_near_copy_weight": near_copy_weight(logits[:, 1:], self.hp.temperature),
                **sampler_logs,
            }
        return StepOutput(loss, h1, logs)


def near_copy_weight(negative_cosines: torch.Tensor, temperature: float, threshold: float = 0.9) -> torch.Tensor:
    """Mean over anchors of the share of the negatives' softmax weight (at the loss temperature) that falls on
    negatives with cosine > ``threshold`` to the anchor: near-copies of it. The bank moves towards this step's
    queries before the loss (Alg. 1), so some negatives are the anchor's own neighbourhood; this measures how
    much of the repulsion they take."""
    weights = torch.softmax(negative_cosines / temperature, dim=1)
    return (weights * (negative_cosines > threshold)).sum(dim=1).mean()


FP = TypeVar("FP", bound=FeatureBankParams)


class _FeatureVEM(VEM[FP]):
    """VEM with a feature-space memory bank (Algorithms 1 and 2)."""

    def bank_sampler(self) -> BankSampler:
        raise NotImplementedError

    def build_sampler(self) -> None:
        self.memory = FeatureBank(
            self.hp.bank_size, self.cfg.model.proj_out, self.bank_sampler(), seed=self.cfg.train.seed
        )

    def bank_lr_scale(self) -> float:
        """The backbone schedule's current factor (lr / initial lr), or 1 outside a fit or when not asked."""
        if not self.hp.bank_lr_schedule or self._trainer is None or not self.trainer.optimizers:
            return 1.0
        group = self.trainer.optimizers[0].param_groups[0]
        return float(group["lr"]) / float(group.get("initial_lr", group["lr"]))

    def sample_negatives(
        self, queries: torch.Tensor, view1: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        step = self.memory.update(
            queries, self.sampler_seed(), self.bank_lr_scale(), pre_update=self.hp.loss_bank == "pre-update"
        )
        return step.negatives, {"bank_query_cos": step.nearest_query_cosine, "bank_displacement": step.displacement}


@METHODS.register("vem-langevin")
class VEMLangevin(_FeatureVEM[VEMLangevinParams]):
    """VEM-Langevin (Algorithm 1)."""

    def bank_sampler(self) -> BankSampler:
        hp = self.hp
        return BankSampler(
            "langevin",
            hp.bank_temperature,
            hp.steps,
            hp.step_size,
            hp.schedule,
            hp.noise_scale,
            update=hp.bank_update,
            momentum=hp.bank_momentum,
        )


@METHODS.register("vem-svgd")
class VEMSVGD(_FeatureVEM[VEMSVGDParams]):
    """VEM-SVGD: SVGD on the bank with Eq. 9's RBF kernel (``kernel: linear`` = Algorithm 2 as printed, degenerate)."""

    def bank_sampler(self) -> BankSampler:
        hp = self.hp
        return BankSampler(
            "svgd",
            hp.bank_temperature,
            hp.steps,
            hp.step_size,
            hp.schedule,
            kernel=hp.kernel,
            bandwidth=hp.bandwidth,
            update=hp.bank_update,
            momentum=hp.bank_momentum,
        )


@METHODS.register("vem-image")
class VEMImage(VEM[VEMImageParams]):
    """VEM-Image: Langevin on K image particles (Eq. 8); negatives are their projections.

    BatchNorm: the Langevin moves and the negatives' projections both use the running (data)
    statistics (eval mode), while the queries use their batch's statistics, which estimate the
    same data statistics. Normalising the particles by *their own* batch statistics would erase
    the mean and scale by which model samples differ from data, which is what the contrast is
    meant to see, and would make a particle's negative depend on the other particles (tested:
    it does not). No gradient flows through f(x'): as in Algorithm 1 (lines 16-20), where the
    bank B enters the loss as a constant, the negatives are sampled, not learned through.
    """

    def build_sampler(self) -> None:
        info, hp = self.data_info, self.hp
        self.image_bank = ImageBank(
            hp.particles,
            (info.channels, info.image_size, info.image_size),
            self.normalizer.bounds(),
            hp.steps,
            hp.step_size,
            hp.noise_scale,
            hp.schedule,
            seed=self.cfg.train.seed,
        )

    def sample_negatives(
        self, queries: torch.Tensor, view1: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        queries = gather_no_grad(queries)
        t = self.hp.bank_temperature

        def log_density(x: torch.Tensor) -> torch.Tensor:  # log sum_n exp(f(x) . q_n / t), Eq. 8
            return torch.logsumexp(self.query(x)[1] @ queries.T / t, dim=1)

        with _eval_mode(self.backbone, self.projector):
            particles = self.image_bank.update(view1, log_density, self.normalizer.bounds(), self.sampler_seed())
            with torch.no_grad():
                return self.query(particles)[1], {}
