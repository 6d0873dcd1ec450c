"""Local Lipschitz estimates of the encoder distribution (CEB paper Sec. 2.4 and appendix G).

For an image x and a photometric perturbation x + dx (brightness, contrast, and on colour
images saturation and hue, raised or lowered by the run's maximum augmentation strength),
with e(z|x) = vMF(mean(x), kappa):

    sampled (Eq. 19/28):  |log e(z|x) - log e(z|x+dx)| / ||dx||,  one z ~ e(z|x) per pair
    KL bound (Eq. 36):    sqrt(max(KL[e_x || e_x+dx], KL[e_x+dx || e_x])) / ||dx||   (<= L)

||dx|| is the L2 norm of the pixel change in [0, 1] units over all pixels and channels.
mean(x) is the e(z|x) mean direction of a :class:`DirectionalEncoder` (``encoder_mean``: C-SimCLR's
normalized projection, BYOL's and C-BYOL's normalized prediction), else the normalized projection.
kappa defaults to the run's own kappa_e when its encoder is a vMF (C-SimCLR 1024, C-BYOL 16384),
and to 1024 (C-SimCLR's kappa_e) for deterministic embeddings; the protocol records which. To put
several runs on one yardstick (the estimate grows with kappa), pass one number as ``kappa``.
The perturbations use the view generator's own ColorJitter formulas (kornia = torchvision:
brightness and contrast are multiplicative factors 1 +- s, hue a shift of +-h turns), not the
additive brightness of the paper's TensorFlow code.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

import kornia.enhance as KE
import torch
import torch.nn.functional as F
from torch.distributions import kl_divergence

from probcl.config import AtLeast, Positive, Seed
from probcl.data.augment import resolve_view_params
from probcl.distributions.vmf import VonMisesFisher
from probcl.errors import ConfigError
from probcl.eval.context import ModelOnData
from probcl.eval.inputs import id_test_images
from probcl.eval.suites import SUITES
from probcl.methods.capabilities import DirectionalEncoder, StochasticEncoder

if TYPE_CHECKING:  # a suite that needs the method builds it when it runs (ModelOnData.model)
    from probcl.methods.base import SSLMethod

DEFAULT_KAPPA = 1024.0
PAPER_STRENGTHS = (0.4, 0.4, 0.2, 0.1)  # CEB paper Table 6: brightness, contrast, saturation, hue
MIN_DX_NORM = 1e-6  # pairs whose pixels did not change (e.g. a black image made darker) are skipped
ADJUSTMENTS: dict[str, Callable[[torch.Tensor, float], torch.Tensor]] = {
    "brightness": lambda x, s: KE.adjust_brightness_accumulative(x, 1.0 + s),
    "contrast": lambda x, s: KE.adjust_contrast_with_mean_subtraction(x, 1.0 + s),
    "saturation": lambda x, s: KE.adjust_saturation_with_gray_subtraction(x, 1.0 + s),
    "hue": lambda x, s: KE.adjust_hue(x, 2 * math.pi * s),
}
COLOUR_ONLY = ("saturation", "hue")


def perturbations(strengths: Sequence[float], channels: int) -> dict[str, tuple[str, float]]:
    """Named perturbations ``{"brightness+": ("brightness", +s), ...}`` for the non-zero strengths."""
    out = {}
    for kind, strength in zip(ADJUSTMENTS, strengths):
        if strength > 0 and (channels == 3 or kind not in COLOUR_ONLY):
            out[f"{kind}+"] = (kind, float(strength))
            out[f"{kind}-"] = (kind, -float(strength))
    return out


def perturb(images: torch.Tensor, kind: str, signed_strength: float) -> torch.Tensor:
    """[0, 1] images with one photometric adjustment applied, clamped to [0, 1]."""
    return ADJUSTMENTS[kind](images, signed_strength).clamp(0.0, 1.0)


def encoder_mean_fn(model: SSLMethod, layer: str = "encoder") -> Callable[[torch.Tensor], torch.Tensor]:
    """Unit mean directions of e(z|x): the method's ``encoder_mean`` (layer "encoder", for a
    :class:`DirectionalEncoder`) or the normalized projection (layer "projection", and other methods)."""
    if layer not in ("encoder", "projection"):
        raise ConfigError(f"lipschitz layer must be 'encoder' or 'projection', got {layer!r}")
    if layer == "encoder" and isinstance(model, DirectionalEncoder):
        return model.encoder_mean
    return lambda images: F.normalize(model.project_batch(images), dim=1)


def local_lipschitz(
    mean_x: torch.Tensor, mean_dx: torch.Tensor, dx_norm: torch.Tensor, kappa: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-pair (sampled estimate of Eq. 19, KL lower bound of Eq. 36) for vMF encoders of concentration kappa.

    Draws one z ~ e(z|x) per pair from torch's global generator (seed it for reproducibility).
    """
    e_x = VonMisesFisher(mean_x.double(), kappa)
    e_dx = VonMisesFisher(mean_dx.double(), kappa)
    z = e_x.sample()
    sampled = (e_x.log_prob(z) - e_dx.log_prob(z)).abs() / dx_norm.double()
    kl = torch.maximum(kl_divergence(e_x, e_dx), kl_divergence(e_dx, e_x)).clamp_min(0.0)
    return sampled, kl.sqrt() / dx_norm.double()


@torch.no_grad()
def lipschitz_values(
    model: SSLMethod,
    images: torch.Tensor,
    perturbs: dict[str, tuple[str, float]],
    kappa: float,
    layer: str = "encoder",
    batch_size: int = 512,
    device: torch.device | str = "cpu",
    seed: int = 0,
) -> dict[str, dict[str, torch.Tensor]]:
    """``{name: {"sampled", "kl_bound", "dx_norm"}}`` per-pair values for uint8 ``images`` (N, C, H, W)."""
    mean_fn = encoder_mean_fn(model, layer)
    parts: dict[str, dict[str, list[torch.Tensor]]] = {
        n: {"sampled": [], "kl_bound": [], "dx_norm": []} for n in perturbs
    }
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for start in range(0, len(images), batch_size):
            x = images[start : start + batch_size].to(device).float() / 255.0
            mean_x = mean_fn(x).cpu()
            for name, (kind, strength) in perturbs.items():
                x_dx = perturb(x, kind, strength)
                dx_norm = (x_dx - x).flatten(1).norm(dim=1).cpu()
                keep = dx_norm > MIN_DX_NORM
                if not keep.any():
                    continue
                sampled, bound = local_lipschitz(mean_x[keep], mean_fn(x_dx[keep]).cpu(), dx_norm[keep], kappa)
                for key, value in (("sampled", sampled), ("kl_bound", bound), ("dx_norm", dx_norm[keep])):
                    parts[name][key].append(value.float())
    return {n: {k: torch.cat(v) if v else torch.zeros(0) for k, v in d.items()} for n, d in parts.items()}


@dataclass
class LipschitzOptions:
    kappa: Annotated[float, Positive] | Literal["run"] | None = None  # None: kappa_e if the run has one, else 1024
    max_images: Annotated[int | None, AtLeast(1)] = 2000  # seeded test subset
    layer: Literal["encoder", "projection"] = "encoder"  # the method's e(z|x) mean, or the normalized projection
    strengths: list[float] | None = None  # brightness, contrast, saturation, hue (default: the run's views)
    seed: Seed = 0  # seed of the image subset and the random perturbations
    histogram_bins: Annotated[int, AtLeast(1)] = 40  # bins of the per-perturbation histograms (figure)

    def __post_init__(self) -> None:
        if self.strengths is not None and len(self.strengths) != len(ADJUSTMENTS):
            raise ConfigError(
                f"lipschitz.strengths needs {len(ADJUSTMENTS)} values ({', '.join(ADJUSTMENTS)}), got {self.strengths}"
            )


def kappa_for(model: SSLMethod, kappa: float | str | None) -> tuple[float, str]:
    """The vMF concentration to measure ``model`` with, and where it came from."""
    if kappa is None:
        if isinstance(model, StochasticEncoder):
            return float(model.encoder_concentration), "the run's kappa_e (default)"
        return DEFAULT_KAPPA, f"default {DEFAULT_KAPPA:g} (the method has no kappa_e)"
    if kappa == "run":
        if not isinstance(model, StochasticEncoder):
            raise ConfigError(f"method {model.cfg.method!r} has no kappa_e; pass a number as lipschitz.kappa")
        return float(model.encoder_concentration), "the run's kappa_e"
    return float(kappa), "lipschitz.kappa option"


def _perturbations_for(model: SSLMethod, strengths: list[float] | None) -> tuple[dict[str, tuple[str, float]], str]:
    """The suite's perturbations and where their strengths come from (option, the run's views, or the paper)."""
    channels = model.data_info.channels
    if strengths is not None:
        return perturbations(strengths, channels), "option"
    perturbs = perturbations(resolve_view_params(model.cfg.augment).jitter, channels)
    if perturbs:
        return perturbs, f"augment preset {model.cfg.augment.preset}"
    return perturbations(PAPER_STRENGTHS, channels), "CEB paper Table 6 (the run's views have no colour jitter)"


def value_histogram(values: torch.Tensor, bins: int) -> dict[str, list]:
    """Counts of non-negative ``values`` on equal-width bins over [0, 99th percentile]; larger values
    fall in the last bin (the figure's x range stays readable)."""
    top = float(torch.quantile(values.double(), 0.99)) if len(values) else 0.0
    top = top if top > 0 else 1.0
    counts = torch.histc(values.double().clamp(0.0, top), bins, 0.0, top)
    return {"edges": torch.linspace(0.0, top, bins + 1).tolist(), "counts": counts.long().tolist()}


@SUITES.register(
    "lipschitz",
    options=LipschitzOptions,
    title="Local Lipschitz estimates",
    needs_run="its encoder distribution or projection head, and its augmentations",
)
def lipschitz_suite(ctx: ModelOnData, options: LipschitzOptions) -> dict:
    """Mean local Lipschitz estimates (Eq. 19) and KL lower bounds (Eq. 36) per perturbation of test images,
    and per perturbation the histograms of both (figure data for :mod:`probcl.report.lipschitz`).

    Options: ``kappa`` (vMF concentration; default the run's kappa_e, or 1024 without one; ``run`` = kappa_e),
    ``max_images`` (seeded test subset), ``layer`` (encoder | projection), ``strengths`` (brightness,
    contrast, saturation, hue; default: the run's augmentation preset, or the paper's 0.4, 0.4, 0.2, 0.1
    when its views have no colour jitter).
    """
    model, o = ctx.model, options
    kappa_value, kappa_source = kappa_for(model, o.kappa)
    perturbs, source = _perturbations_for(model, o.strengths)
    data, _ = id_test_images(ctx, "lipschitz", o.max_images, o.seed)
    values = lipschitz_values(
        model, data.images, perturbs, kappa_value, o.layer, ctx.batch_size, ctx.torch_device, o.seed
    )
    result: dict[str, Any] = {}
    for name, v in values.items():
        result[name] = float(v["sampled"].mean()) if len(v["sampled"]) else None
        result[f"{name} kl_bound"] = float(v["kl_bound"].mean()) if len(v["kl_bound"]) else None
    result["histograms"] = {
        quantity: {
            name: value_histogram(v[quantity], o.histogram_bins) for name, v in values.items() if len(v[quantity])
        }
        for quantity in ("sampled", "kl_bound")
    }
    uses_encoder = o.layer == "encoder" and isinstance(model, DirectionalEncoder)
    result["protocol"] = {
        "images": len(data),
        "split": "test",
        "kappa": kappa_value,
        "kappa_source": kappa_source,
        "seed": o.seed,
        "strengths_from": source,
        "embedding": "method's e(z|x) mean direction" if uses_encoder else "normalized projection",
        "perturbations": {n: f"{kind} {s:+g}" for n, (kind, s) in perturbs.items()},
        "pairs": {n: len(v["sampled"]) for n, v in values.items()},
        "dx_norm_mean": {n: float(v["dx_norm"].mean()) if len(v["dx_norm"]) else None for n, v in values.items()},
        "estimate": "|log e(z|x) - log e(z|x+dx)| / ||dx||, one z ~ e(z|x) (Eq. 19); "
        "kl_bound = sqrt(max KL) / ||dx|| (Eq. 36); ||dx|| = L2 over [0,1] pixels",
        "histograms": f"{o.histogram_bins} bins on [0, 99th percentile]; larger values in the last bin",
    }
    return result
