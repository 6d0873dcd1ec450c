"""Adversarial robustness of encoder + linear probe, attacked end to end in [0, 1] pixel space.

FGSM (VEM appendix E.2): x_adv = clip(x + eps * sign(grad_x CE(f(x), y)), 0, 1).
PGD (Madry et al. 2018), L-inf: random start in the eps-ball, ``steps`` signed-gradient steps of
size 2.5 eps / steps, each followed by projection onto the eps-ball and [0, 1].
The headline figure is plain top-1 on the attacked images (VEM App. E.2). A second figure,
``*_robust``, counts an image only if it is classified correctly both clean and attacked (the
AutoAttack convention), so it never exceeds clean accuracy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated

import torch
import torch.nn.functional as F

from probcl.config import AtLeast, Positive, Seed
from probcl.errors import ConfigError, DatasetError
from probcl.eval.context import ModelOnData
from probcl.eval.inputs import id_test_images
from probcl.eval.linear import LinearProbe
from probcl.eval.suites import SUITES

Forward = Callable[[torch.Tensor], torch.Tensor]


def input_gradient(forward: Forward, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """grad_x of the summed cross-entropy of ``forward(x)`` (model parameters get no gradient)."""
    x = x.detach().requires_grad_(True)
    loss = F.cross_entropy(forward(x), y, reduction="sum")
    return torch.autograd.grad(loss, x)[0]


def fgsm(forward: Forward, x: torch.Tensor, y: torch.Tensor, eps: float) -> torch.Tensor:
    """One signed-gradient step of size eps, clipped to [0, 1]."""
    return (x + eps * input_gradient(forward, x, y).sign()).clamp(0, 1).detach()


def pgd(
    forward: Forward,
    x: torch.Tensor,
    y: torch.Tensor,
    eps: float,
    steps: int = 10,
    step_size: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """L-inf PGD with a uniform random start; stays in the eps-ball around x and in [0, 1]."""
    step_size = 2.5 * eps / steps if step_size is None else step_size
    start = (torch.rand(x.shape, generator=generator) * 2 - 1).to(x) * eps
    x_adv = (x + start).clamp(0, 1)
    for _ in range(steps):
        x_adv = x_adv + step_size * input_gradient(forward, x_adv, y).sign()
        x_adv = torch.min(torch.max(x_adv, x - eps), x + eps).clamp(0, 1).detach()
    return x_adv


def attacked_correct(
    forward: Forward, attack: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(clean correct, correct on the attacked input) boolean masks, both over all of ``x``."""
    with torch.no_grad():
        clean = forward(x).argmax(1) == y
    x_adv = attack(x, y)
    with torch.no_grad():
        attacked = forward(x_adv).argmax(1) == y
    return clean, attacked


def robust_correct(
    forward: Forward, attack: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(clean correct, robustly correct) boolean masks; robust means correct clean *and* attacked."""
    clean, attacked = attacked_correct(forward, attack, x, y)
    return clean, clean & attacked


Attack = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (images, labels) -> attacked images


def _fgsm_attack(forward: Forward, eps: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return fgsm(forward, x, y, eps)


def _pgd_attack(
    forward: Forward, eps: float, steps: int, generator: torch.Generator, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    return pgd(forward, x, y, eps, steps, generator=generator)


def _probe_on(probe: LinearProbe, device: torch.device) -> LinearProbe:
    return LinearProbe(**{f.name: getattr(probe, f.name).to(device) for f in dataclasses.fields(probe)})


@dataclass
class AdversarialOptions:
    eps: list[Annotated[float, Positive]] = field(default_factory=lambda: [4.0, 8.0])  # radii in units of 1/255
    pgd_steps: Annotated[int, AtLeast(1)] = 10
    max_images: Annotated[int | None, AtLeast(1)] = 1000  # seeded test subset
    seed: Seed = 0


@SUITES.register("adversarial", options=AdversarialOptions, title="Adversarial robustness")
def adversarial_suite(ctx: ModelOnData, options: AdversarialOptions) -> dict:
    """Clean, FGSM and PGD robust top-1 (%) of encoder + linear probe; eps in units of 1/255."""
    pgd_steps, max_images, seed = options.pgd_steps, options.max_images, options.seed
    if ctx.feature_layer == "pixels":
        raise ConfigError("the adversarial suite attacks the encoder; use --features backbone or projection")
    data, _ = id_test_images(ctx, "adversarial", max_images, seed)
    _, probe = ctx.linear_probe()
    probe = _probe_on(probe, ctx.torch_device)
    embed = ctx.embed_fn()

    def forward(x: torch.Tensor) -> torch.Tensor:
        return probe.logits(embed(x))

    eps_values = options.eps
    generator = torch.Generator().manual_seed(seed)
    attacks: dict[str, Attack] = {"clean": lambda x, y: x}
    for e in eps_values:
        attacks[f"fgsm/eps{e:g}"] = partial(_fgsm_attack, forward, e / 255)
        attacks[f"pgd/eps{e:g}"] = partial(_pgd_attack, forward, e / 255, pgd_steps, generator)
    correct = {name: 0 for name in attacks}  # correct on x_adv (VEM App. E.2's accuracy)
    robust = {name: 0 for name in attacks}  # correct on x and on x_adv
    labels = data.labels()
    if labels is None:
        raise DatasetError(f"{data.name}: the adversarial suite needs labeled test images")
    for start in range(0, len(data), ctx.batch_size):
        x = data.images[start : start + ctx.batch_size].to(ctx.torch_device).float() / 255.0
        y = labels[start : start + ctx.batch_size].to(ctx.torch_device)
        for name, attack in attacks.items():
            clean, attacked = attacked_correct(forward, attack, x, y)
            correct[name] += int(attacked.sum())
            robust[name] += int((clean & attacked).sum())
    result: dict = {
        "clean_top1": 100.0 * correct["clean"] / len(data),
        "fgsm": {},
        "pgd": {},
        "fgsm_robust": {},
        "pgd_robust": {},
    }
    for name in attacks:
        if name != "clean":
            kind, label = name.split("/")
            result[kind][label] = 100.0 * correct[name] / len(data)
            result[f"{kind}_robust"][label] = 100.0 * robust[name] / len(data)
    result["protocol"] = ctx.protocol(
        images=len(data),
        eps=[f"{e:g}/255" for e in eps_values],
        pgd=f"{pgd_steps} steps of 2.5*eps/{pgd_steps}, random start, seed {seed}",
        space="[0, 1] pixels, clipped",
        loss="cross-entropy of the linear probe",
        accuracy="fgsm/pgd: top-1 on the attacked images (VEM App. E.2); *_robust: correct on the clean image "
        "and on its attacked version",
        probe="offline linear probe of the `linear` suite",
    )
    return result
