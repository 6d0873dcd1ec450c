"""Optimisers (SGD, Adam, AdamW, LARS, Adam on LARS-rescaled gradients) and the per-step warm-up + cosine
learning-rate schedule."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

from probcl.config import OptimConfig


class LARS(torch.optim.Optimizer):
    """SGD with momentum and layer-wise adaptive rate scaling (You et al. 2017), as in SimCLR's reference.

    For each adapted parameter w with gradient g (weight decay folded in, g <- g + wd w):

        trust = eta ||w|| / ||g||   (1 when either norm is 0)
        v <- momentum v + trust g,   w <- w - lr v

    With ``clip`` (LARC, NVIDIA apex) the trust ratio is the local learning rate itself, capped at the
    global one: trust <- min(trust, lr) / lr, so a step moves w by min(eta ||w|| / ||g||, lr) g.

    eta = 0.001 as in SimCLR's LARS (which BYOL and CEB use). Parameter groups with ``lars=False``
    (biases, norm layers, probes) get plain SGD with momentum and no weight decay, as in SimCLR/BYOL.
    """

    def __init__(
        self,
        params: Iterable,
        lr: float,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        eta: float = 0.001,
        clip: bool = False,
    ) -> None:
        super().__init__(
            params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, eta=eta, clip=clip, lars=True)
        )

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:  # each group in a few multi-tensor (foreach) operations
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = lars_gradients(params, group) if group["lars"] else [p.grad for p in params]
            started = [i for i, p in enumerate(params) if "momentum_buffer" in self.state[p]]
            for i in sorted(set(range(len(params))) - set(started)):
                self.state[params[i]]["momentum_buffer"] = grads[i].clone()
            if started:
                buffers = [self.state[params[i]]["momentum_buffer"] for i in started]
                torch._foreach_mul_(buffers, group["momentum"])
                torch._foreach_add_(buffers, [grads[i] for i in started])
            torch._foreach_add_(params, [self.state[p]["momentum_buffer"] for p in params], alpha=-group["lr"])
        return loss


def lars_gradients(params: list[torch.Tensor], group: dict) -> list[torch.Tensor]:
    """LARS's rescaled gradient of each tensor: trust * (g + wd w), trust = eta ||w|| / ||g + wd w|| (1 when either
    norm is 0; with ``clip``, min(trust, lr) / lr), from the group's ``weight_decay``, ``eta``, ``clip``, ``lr``; in
    multi-tensor operations (a handful of kernels for the whole group, however many tensors it has)."""
    grads = torch._foreach_add([p.grad for p in params], params, alpha=group["weight_decay"])  # type: ignore[misc]
    w_norm = torch.stack(torch._foreach_norm(params))
    g_norm = torch.stack(torch._foreach_norm(grads))
    trust = torch.where((w_norm > 0) & (g_norm > 0), group["eta"] * w_norm / g_norm, torch.ones_like(w_norm))
    if group["clip"] and group["lr"] > 0:
        trust = trust.clamp(max=group["lr"]) / group["lr"]
    torch._foreach_mul_(grads, list(trust.unbind()))
    return list(grads)


class LARSAdam(torch.optim.Adam):
    """Adam on LARS-rescaled gradients: the TaU authors' optimiser (their ``LARSWrapper(Adam, eta=0.001,
    clip=False)``, docs/methods/tau.md#from-the-authors-code; the paper's text says "LARS with learning rate 1e-4").

    Before each Adam step, every adapted tensor's gradient is replaced by :func:`lars_gradients` (weight decay
    folded in, then scaled to norm eta ||w||), and Adam itself applies no weight decay. Adam divides each
    coordinate by its running RMS, so the rescaling mostly changes how past steps are weighted and where Adam's
    eps starts to matter: a tensor's coordinates whose share of its gradient norm is small (TaU's temperature
    row in the last layer) get steps below lr. Groups with ``lars=False`` (biases, norm layers, probes) are
    plain Adam with their own weight decay.
    """

    def __init__(
        self, params: Iterable, lr: float, weight_decay: float = 0.0, eta: float = 0.001, clip: bool = False
    ) -> None:
        super().__init__(params, lr=lr, weight_decay=weight_decay)
        for group in self.param_groups:
            group.setdefault("lars", True)
            group.setdefault("eta", eta)
            group.setdefault("clip", clip)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        decays = [group["weight_decay"] for group in self.param_groups]
        for group in self.param_groups:
            if not group["lars"]:
                continue
            params = [p for p in group["params"] if p.grad is not None]
            for p, grad in zip(params, lars_gradients(params, group)):
                p.grad = grad
            group["weight_decay"] = 0.0  # folded into the rescaled gradient
        try:
            super().step()
        finally:
            for group, decay in zip(self.param_groups, decays):
                group["weight_decay"] = decay
        return loss


def _is_excluded(name: str, param: nn.Parameter) -> bool:
    return param.ndim <= 1  # biases and normalisation parameters


def build_optimizer(
    cfg: OptimConfig, named_params: list[tuple[str, nn.Parameter]], probe_params: list[nn.Parameter], batch_size: int
) -> torch.optim.Optimizer:
    """Optimiser over the method's parameters plus a separate, weight-decay-free probe group.

    The probe group is marked ``scheduled=False`` so the schedule leaves its lr alone.
    """
    lr = cfg.lr * batch_size / 256 if cfg.scale_lr_by_batch else cfg.lr
    params = [p for _, p in named_params if p.requires_grad]
    groups: list[dict] = []
    if cfg.name in ("lars", "adam-lars"):
        groups.append(dict(params=[p for n, p in named_params if p.requires_grad and not _is_excluded(n, p)]))
        groups.append(
            dict(
                params=[p for n, p in named_params if p.requires_grad and _is_excluded(n, p)],
                lars=False,
                weight_decay=0.0,
            )
        )
    else:
        groups.append(dict(params=params))
    groups = [g for g in groups if g["params"]]
    probe_group = dict(params=probe_params, weight_decay=0.0, lr=cfg.probe_lr, scheduled=False, lars=False)
    if cfg.name in ("sgd", "lars"):
        probe_group["lr"] = cfg.probe_lr * 100  # SGD probes need a larger step (solo-learn uses 0.1)
    if probe_params:
        groups.append(probe_group)
    if cfg.name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    if cfg.name == "adam":
        return torch.optim.Adam(groups, lr=lr, weight_decay=cfg.weight_decay)
    if cfg.name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, weight_decay=cfg.weight_decay)
    if cfg.name == "adam-lars":
        return LARSAdam(groups, lr=lr, weight_decay=cfg.weight_decay, eta=cfg.lars_eta, clip=cfg.lars_clip)
    return LARS(
        groups, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, eta=cfg.lars_eta, clip=cfg.lars_clip
    )


def lr_factor(step: int, total_steps: int, warmup_steps: int, schedule: str, min_ratio: float = 0.0) -> float:
    """Multiplier of the base lr at ``step``: linear warm-up, then cosine decay to ``min_ratio`` (or constant)."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: OptimConfig, total_steps: int, steps_per_epoch: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Per-step LambdaLR applying :func:`lr_factor` to scheduled groups (probe groups stay constant)."""
    warmup = int(round(cfg.warmup_epochs * steps_per_epoch))
    lambdas = [
        (lambda step: lr_factor(step, total_steps, warmup, cfg.schedule, cfg.min_lr_ratio))
        if group.get("scheduled", True)
        else (lambda step: 1.0)
        for group in optimizer.param_groups
    ]
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambdas)
