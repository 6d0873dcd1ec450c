"""Local Lipschitz estimates of the encoder distribution (CEB paper Sec. 2.4 and appendix G).

For an image x and a photometric perturbation x + dx (brightness, contrast, and on colour
images saturation and hue, raised or lowered by the run's maximum augmentation strength),
with e(z|x) = vMF(mean(x), kappa):

    sampled (Eq. 19/28):  |log e(z|x) - log e(z|x+dx)| / ||dx||,  one z ~ e(z|x) per pair
    KL bound (Eq. 36):    sqrt(max(KL[e_x || e_x+dx], KL[e_x+dx || e_x])) / ||dx||   (<= L)

||dx|| is the L2 norm of the pixel change in [0, 1] units over all pixels and channels.
mean(x) is the method's e(z|x) mean direction where it has one (``encoder_mean``: C-SimCLR's
normalized projection, C-BYOL's normalized prediction), else the normalized projection.
kappa is one stated value for every run (default 1024, C-SimCLR's kappa_e), so that methods
with deterministic embeddings and CEB methods are measured by the same yardstick.
The perturbations use the view generator's own ColorJitter formulas (kornia = torchvision:
brightness and contrast are multiplicative factors 1 +- s, hue a shift of +-h turns), not the
additive brightness of the paper's TensorFlow code.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

import kornia.enhance as KE
import torch
import torch.nn.functional as F
from torch.distributions import kl_divergence

from probcl.data.augment import resolve_view_params
from probcl.distributions.vmf import VonMisesFisher
from probcl.eval.inputs import as_list, id_test_images
from probcl.eval.suites import SUITES, EvalContext

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
    for (kind, strength) in zip(ADJUSTMENTS, strengths):
        if strength > 0 and (channels == 3 or kind not in COLOUR_ONLY):
            out[f"{kind}+"] = (kind, float(strength))
            out[f"{kind}-"] = (kind, -float(strength))
    return out


def perturb(images: torch.Tensor, kind: str, signed_strength: float) -> torch.Tensor:
    """[0, 1] images with one photometric adjustment applied, clamped to [0, 1]."""
    return ADJUSTMENTS[kind](images, signed_strength).clamp(0.0, 1.0)


def encoder_mean_fn(model: Any, layer: str = "encoder") -> Callable[[torch.Tensor], torch.Tensor]:
    """Unit mean directions of e(z|x): the method's ``encoder_mean`` (layer "encoder", when defined)
    or the normalized projection (layer "projection", and the fallback)."""
    if layer not in ("encoder", "projection"):
        raise ValueError(f"lipschitz layer must be 'encoder' or 'projection', got {layer!r}")
    if layer == "encoder" and hasattr(model, "encoder_mean"):
        return model.encoder_mean
    return lambda images: F.normalize(model.project(images), dim=1)


def local_lipschitz(mean_x: torch.Tensor, mean_dx: torch.Tensor, dx_norm: torch.Tensor, kappa: float
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
def lipschitz_values(model: Any, images: torch.Tensor, perturbs: dict[str, tuple[str, float]], kappa: float,
                     layer: str = "encoder", batch_size: int = 512, device: torch.device | str = "cpu",
                     seed: int = 0) -> dict[str, dict[str, torch.Tensor]]:
    """``{name: {"sampled", "kl_bound", "dx_norm"}}`` per-pair values for uint8 ``images`` (N, C, H, W)."""
    mean_fn = encoder_mean_fn(model, layer)
    parts: dict[str, dict[str, list[torch.Tensor]]] = {n: {"sampled": [], "kl_bound": [], "dx_norm": []} for n in perturbs}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for start in range(0, len(images), batch_size):
            x = images[start:start + batch_size].to(device).float() / 255.0
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


def _kappa_for(model: Any, kappa: Any) -> float:
    if kappa is None:
        return DEFAULT_KAPPA
    if kappa == "run":
        if not hasattr(model, "encoder_concentration"):
            raise ValueError(f"method {model.cfg.method!r} has no kappa_e; pass a number as lipschitz.kappa")
        return float(model.encoder_concentration)
    if not isinstance(kappa, (int, float)) or kappa <= 0:
        raise ValueError(f"lipschitz.kappa must be a positive number or 'run', got {kappa!r}")
    return float(kappa)


def _perturbations_for(model: Any, strengths: Any) -> tuple[dict[str, tuple[str, float]], str]:
    """The suite's perturbations and where their strengths come from (option, the run's views, or the paper)."""
    channels = model.data_info.channels
    if strengths is not None:
        jitter = [float(s) for s in as_list(strengths)]
        if len(jitter) != 4:
            raise ValueError(f"lipschitz.strengths needs 4 values (brightness, contrast, saturation, hue), got {jitter}")
        return perturbations(jitter, channels), "option"
    perturbs = perturbations(resolve_view_params(model.cfg.augment).jitter, channels)
    if perturbs:
        return perturbs, f"augment preset {model.cfg.augment.preset}"
    return perturbations(PAPER_STRENGTHS, channels), "CEB paper Table 6 (the run's views have no colour jitter)"


@SUITES.register("lipschitz")
def lipschitz_suite(ctx: EvalContext, kappa: Any = None, max_images: Optional[int] = 2000, layer: str = "encoder",
                    strengths: Any = None, seed: int = 0, plot: bool = True) -> dict:
    """Mean local Lipschitz estimates (Eq. 19) and KL lower bounds (Eq. 36) per perturbation of test images.

    Options: ``kappa`` (vMF concentration for every run, default 1024; ``run`` = the run's kappa_e),
    ``max_images`` (seeded test subset), ``layer`` (encoder | projection), ``strengths`` (brightness,
    contrast, saturation, hue; default: the run's augmentation preset, or the paper's 0.4, 0.4, 0.2, 0.1
    when its views have no colour jitter), ``plot`` (histogram PNG).
    Per-pair values go to RUN/plots/lipschitz.npz for :func:`probcl.report.lipschitz.plot_lipschitz_histograms`.
    """
    from probcl.report.lipschitz import plot_lipschitz_histograms, save_lipschitz_values

    model = ctx.model
    kappa_value = _kappa_for(model, kappa)
    perturbs, source = _perturbations_for(model, strengths)
    data, _ = id_test_images(ctx, max_images, seed)
    values = lipschitz_values(model, data.images, perturbs, kappa_value, layer, ctx.batch_size, ctx.torch_device, seed)
    result: dict[str, Any] = {}
    for name, v in values.items():
        result[name] = float(v["sampled"].mean()) if len(v["sampled"]) else None
        result[f"{name} kl_bound"] = float(v["kl_bound"].mean()) if len(v["kl_bound"]) else None
    uses_encoder = layer == "encoder" and hasattr(model, "encoder_mean")
    result["protocol"] = {
        "images": len(data), "split": "test", "kappa": kappa_value, "seed": seed, "strengths_from": source,
        "embedding": "method's e(z|x) mean direction" if uses_encoder else "normalized projection",
        "perturbations": {n: f"{kind} {s:+g}" for n, (kind, s) in perturbs.items()},
        "pairs": {n: len(v["sampled"]) for n, v in values.items()},
        "dx_norm_mean": {n: float(v["dx_norm"].mean()) if len(v["dx_norm"]) else None for n, v in values.items()},
        "estimate": "|log e(z|x) - log e(z|x+dx)| / ||dx||, one z ~ e(z|x) (Eq. 19); "
                    "kl_bound = sqrt(max KL) / ||dx|| (Eq. 36); ||dx|| = L2 over [0,1] pixels",
    }
    npz = save_lipschitz_values(ctx.paths.plots / "lipschitz.npz", values)
    if plot:
        png = plot_lipschitz_histograms({model.cfg.method: ctx.run_dir}, ctx.paths.plots / "lipschitz.png")
        result["protocol"]["plot"] = str(png)
    result["protocol"]["values"] = str(npz)
    return result
