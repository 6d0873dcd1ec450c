"""TaU, Temperature as Uncertainty (Zhang et al.): a learned per-input temperature as an uncertainty score.

The head emits d + 1 numbers: a d-dim embedding and a raw scalar u. The contrastive
logits of each anchor are scaled by its inverse temperature alpha = sigmoid(u) / scale
(Algorithm 1; appendix A), see :mod:`probcl.losses.tau`. A high temperature (low u) says
the objective is forgiving about where the input lands: the input is uncertain.

- ``tau-simclr``: SimCLR with a TaU head, over the 2N - 1 other views of the batch.
- ``tau-moco``: MoCo v2 with a TaU query head, over the queue (the key head's u is unused).
- ``tau-posthoc``: a frozen pretrained encoder (``cfg.init``: a probcl run or a weights
  file); only a temperature head (and, optionally, a fresh projection) is trained with the
  TaU-SimCLR objective (paper Table 3).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, ClassVar, Generic, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from probcl.config import Config, ConfigError, Positive
from probcl.losses.tau import inverse_temperature, tau_info_nce_loss, tau_nt_xent_loss
from probcl.methods.base import METHODS, SSLMethod, StepOutput
from probcl.methods.capabilities import HasUncertainty
from probcl.methods.components import QueueParams, moco_head
from probcl.methods.moco import MomentumContrast, Queries
from probcl.models.heads import projection_head, temperature_head
from probcl.models.pretrained import BACKBONE_FIELDS, describe_pretrained

# Uncertainty scores (higher = more uncertain), both from the pre-sigmoid u (appendix A):
# "neg_u": -u, i.e. a higher temperature; "neg_u_squared": -u^2, the authors' code's u^2
# (where a large u^2 means in-distribution) turned into an outlier score.
UNCERTAINTY_SCORES = ("neg_u", "neg_u_squared")


# Bins of the u histogram logged every step (train/u_hist/LO to HI = share of the batch's views with LO <= u < HI;
# characters every logger accepts, MLflow's included),
# which the run report draws as a histogram over training: unit bins over [-8, 8) and the two open tails. A view
# whose sigmoid(u) exceeds SATURATED (u > 4.6) is on the sigmoid's bound, where u's gradient has almost vanished.
U_HISTOGRAM_EDGES = (-math.inf, *range(-8, 9), math.inf)
SATURATED = 0.99


def u_histogram(u: torch.Tensor, edges: tuple[float, ...] = U_HISTOGRAM_EDGES) -> dict[str, torch.Tensor]:
    """``{"u_hist/LO to HI": share of u in [LO, HI)}`` over consecutive ``edges`` (the shares sum to 1)."""
    u = u.detach().float()
    return {f"u_hist/{lo:g} to {hi:g}": ((u >= lo) & (u < hi)).float().mean() for lo, hi in zip(edges[:-1], edges[1:])}


def uncertainty_from_u(u: torch.Tensor, score: str = "neg_u") -> torch.Tensor:
    """An outlier score (higher = more uncertain) from the raw temperature output u."""
    if score == "neg_u":
        return -u
    if score == "neg_u_squared":
        return -u.square()
    raise ConfigError(f"unknown TaU uncertainty score {score!r}; valid: {', '.join(UNCERTAINTY_SCORES)}")


@dataclass
class TemperatureScaleParams:
    """The TaU head's scale, shared by every TaU method."""

    scale: Annotated[float, Positive] = 0.1  # alpha = sigmoid(u) / scale: temperatures stay above `scale` (app. A)


@dataclass
class TauParams(TemperatureScaleParams):
    gather_distributed: bool = True  # negatives from all ranks (with gradient) under DDP


def constant_u_at_start(head: nn.Sequential) -> nn.Sequential:
    """Zero the last layer's u output: every input starts at u = 0, the fixed temperature 2 * scale."""
    last = head[-1]
    assert isinstance(last, nn.Linear)
    with torch.no_grad():
        last.weight[-1].zero_()
        if last.bias is not None:
            last.bias[-1].zero_()
    return head


TP = TypeVar("TP", bound=TemperatureScaleParams)


class TemperatureAsUncertainty(HasUncertainty, Generic[TP]):
    """Shared by the TaU methods: ``self.projector`` maps backbone features to [embedding, u]."""

    uncertainty_scores: ClassVar[tuple[str, ...]] = UNCERTAINTY_SCORES
    divergence_hint: ClassVar[str] = "lower optim.lr (the paper uses 1e-4 for TaU) or raise method_args.scale"

    if TYPE_CHECKING:  # provided by SSLMethod, which every TaU method also inherits
        hp: TP
        projector: nn.Sequential

        def embed_batch(self, images: torch.Tensor) -> torch.Tensor: ...

    def split(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Backbone features (N, F) -> embedding (N, d) and raw temperature output u (N,)."""
        out = self.projector(h)
        return out[:, :-1], out[:, -1]

    def project_batch(self, images: torch.Tensor) -> torch.Tensor:
        """The d-dim embedding (without u) of one uint8 or [0, 1] float batch."""
        return self.split(self.embed_batch(images))[0]

    def raw_u(self, images: torch.Tensor) -> torch.Tensor:
        """Pre-sigmoid temperature output u (N,) of one batch: the inverse temperature is sigmoid(u) / scale."""
        return self.split(self.embed_batch(images))[1]

    def uncertainty_batch(self, images: torch.Tensor, score: str) -> torch.Tensor:
        """Per-image uncertainty (higher = more uncertain); ``score`` is one of ``UNCERTAINTY_SCORES``."""
        return uncertainty_from_u(self.raw_u(images), score)

    def temperature_logs(self, u: torch.Tensor) -> dict[str, torch.Tensor]:
        """Mean temperature, u's mean and spread, the share of views on the sigmoid's bound, u's histogram."""
        u = u.detach()
        return {
            "temperature": (1.0 / inverse_temperature(u, self.hp.scale)).mean(),
            "u_mean": u.mean(),
            "u_std": u.std(),
            "u_saturated": (torch.sigmoid(u) > SATURATED).float().mean(),
            **u_histogram(u),
        }


@METHODS.register("tau-simclr")
class TauSimCLR(TemperatureAsUncertainty[TauParams], SSLMethod[TauParams]):
    """SimCLR whose fixed temperature is replaced by a per-view learned one (Algorithm 1)."""

    def build(self) -> None:
        mc = self.cfg.model
        self.projector = constant_u_at_start(
            projection_head(self.feature_dim, mc.proj_hidden, mc.proj_out + 1, mc.proj_layers, mc.norm, mc.act)
        )

    def step(self, view1, view2, batch) -> StepOutput:
        h1, h2 = self.backbone(view1), self.backbone(view2)
        (z1, u1), (z2, u2) = self.split(h1), self.split(h2)
        loss = tau_nt_xent_loss(z1, z2, u1, u2, self.hp.scale, self.hp.gather_distributed)
        return StepOutput(loss, h1, self.temperature_logs(torch.cat([u1, u2])))


@dataclass
class TauMoCoParams(QueueParams, TemperatureScaleParams):
    shift: bool = True  # logits (cos - 1) * alpha, as in the authors' code (same loss value)


class EmbeddingOnly(nn.Module):
    """A TaU head that returns only its embedding columns (for MoCo's momentum key head)."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.head(h)[:, :-1]


@METHODS.register("tau-moco")
class TauMoCo(TemperatureAsUncertainty[TauMoCoParams], MomentumContrast[TauMoCoParams]):
    """MoCo v2 whose query logits (positive and queue) are scaled by the query's learned alpha."""

    def query_head(self) -> nn.Sequential:
        """MoCo's head with one more output, u."""
        return constant_u_at_start(moco_head(self.feature_dim, self.cfg.model, self.hp.proj_batch_norm, 1))

    def key_head(self) -> nn.Module:
        """Keys are embeddings without u."""
        return EmbeddingOnly(self.projector)

    def queries(self, view: torch.Tensor) -> Queries:
        """Backbone features, L2-normalized embeddings (u dropped) and raw u of ``view`` (with gradient)."""
        h = self.backbone(view)
        z, u = self.split(h)
        return Queries(h, F.normalize(z, dim=1), u)

    def query_loss(self, queries: Queries, keys: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
        """MoCo's Eq. 1 with the query's inverse temperature sigmoid(u) / scale (TaU, appendix A)."""
        assert queries.stat is not None  # u, from :meth:`queries`
        return tau_info_nce_loss(queries.q, keys, negatives, queries.stat, self.hp.scale, self.hp.shift)

    def query_logs(self, queries: list[Queries]) -> dict[str, torch.Tensor]:
        return self.temperature_logs(torch.cat([p.stat for p in queries if p.stat is not None]))


@dataclass
class TauPosthocParams(TauParams):
    projection: bool = False  # also train a fresh projection head (default: the frozen feature is the embedding)
    # The frozen encoder's input normalization, per channel; default: what init records, else the data's statistics.
    input_mean: list[float] | None = None  # normalization mean per channel (with input_std)
    input_std: list[Annotated[float, Positive]] | None = None  # normalization std per channel (with input_mean)

    def __post_init__(self) -> None:
        if (self.input_mean is None) != (self.input_std is None):
            raise ConfigError("method_args.input_mean and method_args.input_std must be given together")


@METHODS.register("tau-posthoc")
class TauPosthoc(TauSimCLR):
    """Post-hoc TaU (paper Table 3): a frozen encoder from ``cfg.init``; only the temperature head trains."""

    Params = TauPosthocParams
    hp: TauPosthocParams

    @classmethod
    def prepare_config(cls, cfg: Config) -> Config:
        """Take the backbone architecture and input normalization from the pretrained encoder."""
        source = describe_pretrained(cfg.init, cfg.method)
        model, args = cfg.model, dict(cfg.method_args)
        if source.model is not None:
            recorded = {k: source.model[k] for k in BACKBONE_FIELDS if k in source.model}
            changed = {k: v for k, v in recorded.items() if getattr(model, k) != v}
            if changed:
                warnings.warn(
                    f"{cfg.method}: model settings taken from the pretrained encoder {source.path}: "
                    + ", ".join(f"model.{k}={v}" for k, v in changed.items()),
                    stacklevel=2,
                )
            model = dataclasses.replace(model, **recorded)
        if source.mean is not None and source.std is not None and "input_mean" not in args:
            args.update(input_mean=list(source.mean), input_std=list(source.std))
        return dataclasses.replace(cfg, model=model, method_args=args)

    def build(self) -> None:
        self.backbone.requires_grad_(False)
        self.backbone.eval()
        if self.hp.projection:
            super().build()
        else:
            self.temperature_head = temperature_head(self.feature_dim)
        if self.hp.input_mean is not None and self.hp.input_std is not None:
            self._set_input_normalization(self.hp.input_mean, self.hp.input_std)

    def _set_input_normalization(self, mean: list[float], std: list[float]) -> None:
        channels = self.data_info.channels
        if len(mean) != channels or len(std) != channels:
            raise ConfigError(
                f"method_args.input_mean/input_std need {channels} values (one per channel), got {mean} / {std}"
            )
        self.normalizer.mean.copy_(torch.tensor(mean).view_as(self.normalizer.mean))
        self.normalizer.std.copy_(torch.tensor(std).view_as(self.normalizer.std))
        self.data_info = dataclasses.replace(self.data_info, mean=list(mean), std=list(std))

    def split(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.hp.projection:
            return super().split(h)
        return h, self.temperature_head(h).squeeze(1)

    def train(self, mode: bool = True) -> TauPosthoc:
        """Train mode everywhere but the frozen backbone, whose BatchNorm statistics stay fixed."""
        super().train(mode)
        self.backbone.eval()
        return self
