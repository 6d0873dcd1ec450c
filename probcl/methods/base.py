"""The shared Lightning module every self-supervised method derives from.

A method owns a backbone, its heads and its objective. The base class turns each uint8
batch into two views on the training device, calls the method's :meth:`SSLMethod.step`,
trains an online linear probe on the detached backbone features (solo-learn style,
no gradient to the encoder), stops on a non-finite loss, and builds the optimiser and
the warm-up + cosine schedule. A method with momentum (target) networks declares them in
:meth:`SSLMethod.momentum_pairs` and its EMA rate in :meth:`SSLMethod.momentum`; the base
class applies the update after every optimiser step. Methods expose ``embed`` (backbone
features) and ``project`` (projection-head output): the public entry points, without autograd, in
batches, for any images (:mod:`probcl.models.inference`), over the differentiable one-batch hooks
``embed_batch`` and ``project_batch`` that a method overrides; what else they can do they declare
with the mixins of :mod:`probcl.methods.capabilities` (uncertainty, stochastic encoder, energy).
"""

from __future__ import annotations

import typing
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn

from probcl import methods as method_package
from probcl.config import INFERENCE_BATCH_SIZE, Config, from_dict
from probcl.core.registry import Registry
from probcl.data.augment import Normalizer, ViewGenerator, resolve_view_params
from probcl.data.info import DataInfo
from probcl.errors import ConfigError
from probcl.methods.capabilities import missing_capability
from probcl.methods.divergence import DivergenceWatch, diverged
from probcl.methods.optim import build_optimizer, build_scheduler
from probcl.models.backbones import backbone_features, build_backbone, memory_format_for
from probcl.models.ema import ema_update_
from probcl.models.heads import projection_head
from probcl.models.inference import Inference
from probcl.models.pretrained import describe_pretrained, load_pretrained_
from probcl.runtime.distributed import world_size

if TYPE_CHECKING:
    from probcl.data.sources import ImageSource
    from probcl.models.inference import ImageInput

METHODS: Registry[type[SSLMethod]] = Registry("method")


def log_interval(trainer: pl.Trainer) -> int:
    """The trainer's ``log_every_n_steps`` (an attribute Lightning sets at run time, unknown to type checkers)."""
    return int(trainer.log_every_n_steps)  # type: ignore[attr-defined]


@dataclass
class StepOutput:
    """What a method's training step returns to the base class."""

    loss: torch.Tensor
    features: torch.Tensor  # backbone features of the first view, for the online probe
    logs: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class NoParams:
    """A method without hyper-parameters of its own."""


P = TypeVar("P")


class SSLMethod(Inference, pl.LightningModule, Generic[P]):
    """Base class: ``class M(SSLMethod[MParams])`` implements :meth:`step`; ``self.hp`` is its validated MParams.

    ``Params`` is taken from the type argument; a subclass of a concrete method sets it (and
    annotates ``hp``) itself.
    """

    Params: ClassVar[type] = NoParams
    divergence_hint: ClassVar[str] = "lower optim.lr, or raise the temperature"
    hp: P
    checkpoint_meta: dict[str, Any]  # set by probcl.load: the checkpoint's path, epoch and global step

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "embed_batch" in cls.__dict__:
            raise TypeError(
                f"{cls.__name__} overrides embed_batch: a run's features are its backbone's on normalized input "
                f"(probcl.models.checkpoint.RunBackbone computes them from the checkpoint without the method); "
                f"put what differs in the backbone (model.*) or in a head"
            )
        for base in cls.__dict__.get("__orig_bases__", ()):
            origin, args = typing.get_origin(base), typing.get_args(base)
            if isinstance(origin, type) and issubclass(origin, SSLMethod) and args and isinstance(args[0], type):
                cls.Params = args[0]

    def __init__(self, config: Config | dict, data_info: DataInfo | dict, hp: P | None = None) -> None:
        """``config``: a validated :class:`Config` (or its plain dict, as a checkpoint holds it);
        ``hp``: ``Params`` already validated from ``config.method_args`` (default: validate them here)."""
        super().__init__()
        self.cfg: Config = config if isinstance(config, Config) else from_dict(Config, config).validate()
        self.data_info = data_info if isinstance(data_info, DataInfo) else DataInfo(**data_info)
        self.save_hyperparameters({"config": self.cfg.to_dict(), "data_info": asdict(self.data_info)})
        self.hp = hp if hp is not None else self.params(self.cfg)
        self.normalizer = Normalizer(self.data_info.mean, self.data_info.std)
        self.views = ViewGenerator(
            resolve_view_params(self.cfg.augment),
            self.data_info.image_size,
            self.data_info.channels,
            self.normalizer,
            self.cfg.augment.backend,
        )
        self.backbone = build_backbone(self.cfg.model, self.data_info.channels)
        if self.cfg.init:  # before build(): momentum copies of the backbone start from the same weights
            load_pretrained_(self.backbone, describe_pretrained(self.cfg.init, self.cfg.method))
        self.memory_format = memory_format_for(self.cfg)
        self.backbone.to(memory_format=self.memory_format)
        self.feature_dim: int = typing.cast(int, self.backbone.out_dim)
        classes = self.data_info.num_classes
        self.online_probe = nn.Linear(self.feature_dim, classes) if classes else None
        self.training_data: ImageSource | None = None  # set by use_training_data (pretraining only)
        self.divergence = DivergenceWatch()
        self.build()

    # ----------------------------------------------------------------- to implement
    def build(self) -> None:
        """Create heads and buffers (called at the end of ``__init__``)."""
        mc = self.cfg.model
        self.projector = projection_head(self.feature_dim, mc.proj_hidden, mc.proj_out, mc.proj_layers, mc.norm, mc.act)

    def step(self, view1: torch.Tensor, view2: torch.Tensor, batch: Any) -> StepOutput:
        """The method's objective on two normalized views of the batch."""
        raise NotImplementedError

    def momentum_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        """The (online, target) modules whose target follows the online one by EMA (none by default)."""
        return []

    def momentum(self, steps_done: int) -> float:
        """The EMA rate m of :meth:`momentum_pairs` after ``steps_done`` optimiser steps."""
        raise NotImplementedError(f"{type(self).__name__} declares momentum_pairs, so it must define momentum()")

    def after_optimizer_step(self, steps_done: int) -> None:
        """After optimiser step number ``steps_done`` (1-based): theta_target <- m theta_target +
        (1 - m) theta_online for every declared pair (MoCo Eq. 2, BYOL Sec. 3.1; buffers are copied)."""
        pairs = self.momentum_pairs()
        if pairs:
            m = self.momentum(steps_done)
            for online, target in pairs:
                ema_update_(target, online, m)

    def use_training_data(self, data: ImageSource) -> None:
        """The training set, for objectives that draw from the data distribution beyond the batch (EBCLR's
        re-initialised SGLD chains); ``probcl pretrain`` hands it over before training."""
        self.training_data = data

    @classmethod
    def params(cls, cfg: Config) -> P:
        """``cfg.method_args`` validated into the method's ``Params`` (one-line ConfigError otherwise)."""
        return from_dict(cls.Params, cfg.method_args, "method_args")

    @classmethod
    def prepare_config(cls, cfg: Config) -> Config:
        """Complete ``cfg`` before a run starts (e.g. from a pretrained encoder); config.yaml records the result."""
        return cfg

    # ----------------------------------------------------------------- public API (see Inference.embed)
    def embed_batch(self, images: torch.Tensor) -> torch.Tensor:
        """Backbone features (N, feature_dim) of one uint8 or [0, 1] float batch, with autograd. Every method embeds
        this way (a subclass may not override it): :class:`~probcl.models.checkpoint.RunBackbone` computes a run's
        features from its checkpoint alone, without building the method."""
        return backbone_features(self.backbone, self.normalizer, self.memory_format, images, self.device)

    def project_batch(self, images: torch.Tensor) -> torch.Tensor:
        """Projection-head output (N, d) of one uint8 or [0, 1] float batch, with autograd."""
        return self.projector(self.embed_batch(images))

    def project(self, images: ImageInput, batch_size: int = INFERENCE_BATCH_SIZE) -> torch.Tensor:
        """Projection-head output (N, d) of ``images`` (as for :meth:`embed`), without autograd."""
        return self.infer(self.project_batch, images, batch_size)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.embed_batch(images)

    @torch.no_grad()
    def mc_dropout_projections(self, images: torch.Tensor, passes: int, seed: int = 0) -> torch.Tensor:
        """(passes, N, d) L2-normalized projections of one batch with the backbone's channel dropout
        (``model.dropout2d``) on and everything else in eval mode: MC dropout (Gal & Ghahramani 2016), the TaU
        paper's baseline. The passes draw their masks from ``seed``; the global RNG is left as it was."""
        if self.cfg.model.dropout2d <= 0:
            raise ConfigError(
                f"{self.cfg.method}: MC-dropout needs a model trained with channel dropout (model.dropout2d > 0)"
            )
        was_training = self.training
        self.eval()
        for m in self.backbone.modules():
            if isinstance(m, nn.Dropout2d):
                m.train()
        cuda = self.device.type == "cuda"
        try:
            with torch.random.fork_rng(devices=[self.device.index or torch.cuda.current_device()] if cuda else []):
                torch.manual_seed(seed)
                return torch.stack([F.normalize(self.project_batch(images), dim=1) for _ in range(passes)])
        finally:
            self.train(was_training)

    def __getattr__(self, name: str) -> Any:
        """nn.Module's look-up of parameters, buffers and sub-modules; a capability the method does not declare
        (``uncertainty`` on SimCLR) is one :class:`~probcl.methods.capabilities.MissingCapability` naming the
        registered methods that declare it."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            registry = method_package.METHODS  # every method module, imported on first use
            methods = {method: registry.get(method) for method in registry}
            own = next((method for method, cls in methods.items() if cls is type(self)), type(self).__name__)
            missing = missing_capability(own, name, methods)
            if missing is None:
                raise
            raise missing from None

    # ----------------------------------------------------------------- training
    def training_views(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The two augmented, normalized views of a uint8 batch, in the backbone's memory format."""
        view1, view2 = self.views(images)
        return view1.contiguous(memory_format=self.memory_format), view2.contiguous(memory_format=self.memory_format)

    def logs_this_step(self) -> bool:
        """Whether this training step's metrics reach the loggers (every ``log_every_n_steps``-th optimiser step,
        Lightning's rule): the only steps on which the training loop reads values back from the device, so a GPU
        never waits for the host between logging intervals. Outside a Trainer (benchmarks, tests) every step."""
        try:
            trainer = self.trainer
        except RuntimeError:  # not attached to a Trainer
            return True
        every = log_interval(trainer)
        return every > 0 and (self.global_step + 1) % every == 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        images, labels = batch[0], batch[1]
        view1, view2 = self.training_views(images)
        out = self.step(view1, view2, batch)
        self.divergence.observe(out.loss, self.global_step)
        probe_loss, probe_acc, labeled = self._probe_loss(out.features.detach(), labels)
        if self.logs_this_step():
            self.check_finite()
            batch_size = images.shape[0]
            self.log("train/loss", out.loss, batch_size=batch_size)  # the bar shows it (runs/progress_bar.py)
            for name, value in out.logs.items():
                self.log(f"train/{name}", value, batch_size=batch_size)
            if self.online_probe is not None and int(labeled) > 0:
                self.log("train/probe_loss", probe_loss, batch_size=int(labeled))
                self.log("train/probe_acc", probe_acc, batch_size=int(labeled))
        return out.loss + probe_loss

    def check_finite(self) -> None:
        """Stop with :class:`TrainingDivergedError` if any loss since the run (re)started was not finite (one
        device read; called at logging steps and before every checkpoint, so no checkpoint holds a diverged
        state)."""
        bad = self.divergence.first_bad()
        if bad is not None:
            step, value = bad
            raise diverged(
                self.cfg.run_dir, f"{self.cfg.method}: the loss became {value} at step {step}", self.divergence_hint
            )

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.check_finite()

    def _probe_loss(
        self, features: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The online probe's cross-entropy and accuracy over the batch's labeled images (label >= 0), and their
        count, all on the device (no host read): zero loss when there are none or the data has no classes."""
        labeled = labels >= 0
        count = labeled.sum()
        if self.online_probe is None:
            zero = features.new_zeros(())
            return zero, zero, count
        logits = self.online_probe(features)
        per_image = F.cross_entropy(logits, labels.clamp_min(0), reduction="none")
        denominator = count.clamp_min(1)
        loss = (per_image * labeled).sum() / denominator
        acc = ((logits.argmax(1) == labels) & labeled).sum() / denominator
        return loss, acc, count

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        super().optimizer_step(*args, **kwargs)
        # Lightning counts the step only after this hook returns, hence + 1. Runs before
        # on_train_batch_end, where a checkpoint may be written, so the checkpoint holds the EMA.
        self.after_optimizer_step(self.global_step + 1)

    def trainable_named_parameters(self) -> list[tuple[str, nn.Parameter]]:
        """Parameters the optimiser updates (all but the probe, frozen and momentum copies)."""
        return [(n, p) for n, p in self.named_parameters() if p.requires_grad and not n.startswith("online_probe.")]

    def configure_optimizers(self):
        probe = list(self.online_probe.parameters()) if self.online_probe is not None else []
        optimizer = build_optimizer(
            self.cfg.optim, self.trainable_named_parameters(), probe, self.cfg.train.batch_size * world_size()
        )
        total = max(1, int(self.trainer.estimated_stepping_batches))
        per_epoch = max(1, total // max(1, self.trainer.max_epochs))
        scheduler = build_scheduler(optimizer, self.cfg.optim, total, per_epoch)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
