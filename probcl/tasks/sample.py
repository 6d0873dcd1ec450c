"""Drawing images from a trained model's energy (EBCLR appendix E.5) and saving them as a PNG grid.

The marginal EBM of EBCLR is q(v) ~ exp(-E(v; {v'_m})) with the energy of Eq. 20 taken
against the projections of second views v'_m of real images. Chains start from uniform
noise or from data views and follow proximal SGLD (Eq. 21) with the run's step size and
clamp; samples stay in the valid pixel range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import torch

from probcl.config import AtLeast, NonNegative, Seed
from probcl.core.layout import RunPaths
from probcl.data.loaders import load_dataset
from probcl.data.sources import ImageSource
from probcl.data.unreadable import UnreadableFiles
from probcl.errors import ConfigError
from probcl.methods import METHODS
from probcl.methods.base import SSLMethod
from probcl.methods.capabilities import EnergyModel
from probcl.report.plots import save_figure
from probcl.runs.loading import load_run
from probcl.runs.resume import seed_all
from probcl.samplers.sgld import proximal_sgld

Start = Literal["noise", "data"]


@dataclass
class SampleOptions:
    """How :func:`draw_samples` draws; checked by :func:`~probcl.config.from_dict` (``probcl sample``'s flags).
    Unset SGLD settings default to the run's (sigma: its sigma_min, the low-noise end of Eq. 22)."""

    num: Annotated[int, AtLeast(1)] = 64  # samples
    steps: Annotated[int, NonNegative] = 200  # SGLD steps
    start: Start = "noise"  # chains start from uniform noise or from data views
    step_size: Annotated[float | None, NonNegative] = None  # alpha of Eq. 21
    clamp: Annotated[float | None, NonNegative] = None  # delta of Eq. 21
    sigma: Annotated[float | None, NonNegative] = None  # noise std
    reference_size: Annotated[int, AtLeast(1)] = 256  # data views (second views) that define the energy
    seed: Seed = 0  # seed of the reference views and the SGLD noise


@dataclass
class DrawnSamples:
    """Samples in [0, 1] pixel scale with their energies before and after SGLD."""

    images: torch.Tensor  # (N, C, H, W)
    energies: torch.Tensor  # (N,) after the last step
    initial_energies: torch.Tensor  # (N,) of the starting points


def energy_model_methods() -> list[str]:
    """Names of the registered methods that declare :class:`EnergyModel`."""
    return [name for name in METHODS.names() if issubclass(METHODS.get(name), EnergyModel)]


def _random_images(data: ImageSource, count: int, generator: torch.Generator) -> torch.Tensor:
    idx = torch.randint(len(data), (count,), generator=generator)
    return torch.stack([data[int(i)][0] for i in idx])


@torch.no_grad()
def draw_samples(model: SSLMethod, data: ImageSource, options: SampleOptions | None = None) -> DrawnSamples:
    """Run proximal SGLD on the energy of ``model`` for ``options.steps`` steps from noise or data views.

    ``data`` supplies the reference second views (and the starting views for ``start='data'``).
    Seeds torch's global generator with ``options.seed`` (views and SGLD noise draw from it).
    """
    o = options or SampleOptions()
    if not isinstance(model, EnergyModel):
        raise ConfigError(
            f"method {model.cfg.method!r} has no energy model to sample from; "
            f"`probcl sample` needs a run of: {', '.join(energy_model_methods())}"
        )
    settings = model.sgld_settings()
    step_size = settings.step_size if o.step_size is None else o.step_size
    clamp = settings.clamp if o.clamp is None else o.clamp
    sigma = settings.sigma_min if o.sigma is None else o.sigma
    device = model.device
    generator = torch.Generator().manual_seed(o.seed)
    seed_all(o.seed)  # python's random too: the device views (augment.backend) draw their colour order from it
    reference = model.views.view(_random_images(data, o.reference_size, generator).to(device), 1)
    z_ref = model.energy_reference(reference)
    low, high = model.normalizer.bounds()
    if o.start == "data":
        init = model.views.view(_random_images(data, o.num, generator).to(device), 0)
    else:
        info = model.data_info
        init = low + (high - low) * torch.rand((o.num, info.channels, info.image_size, info.image_size), device=device)
    init = torch.clamp(init, low, high)

    def energy_fn(v: torch.Tensor) -> torch.Tensor:
        return model.image_energy(v, z_ref)

    trace = proximal_sgld(energy_fn, init, o.steps, step_size, clamp, sigma, (low, high))
    return DrawnSamples(
        model.normalizer.inverse(trace.samples).clamp(0, 1).cpu(), energy_fn(trace.samples).cpu(), energy_fn(init).cpu()
    )


def save_sample_grid(
    samples: DrawnSamples, path: str | Path, ncols: int | None = None, title: str | None = None
) -> Path:
    """Write the samples as a PNG grid, each image titled with its energy (atomically)."""
    from matplotlib.figure import Figure

    n = len(samples.images)
    ncols = ncols or math.ceil(math.sqrt(n))
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(1.1 * ncols, 1.25 * nrows + (0.4 if title else 0)))
    for i in range(nrows * ncols):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        ax.axis("off")
        if i >= n:
            continue
        image = samples.images[i].permute(1, 2, 0).numpy()
        if image.shape[2] == 1:
            ax.imshow(image[:, :, 0], cmap="gray", vmin=0, vmax=1)
        else:
            ax.imshow(image)
        ax.set_title(f"E={samples.energies[i]:.2f}", fontsize=7, pad=2)
    if title:
        fig.suptitle(title, fontsize=9)
    return save_figure(fig, path, dpi=100)


def sample_run(
    run: str | Path,
    options: SampleOptions | None = None,
    *,
    out: str | Path | None = None,
    dataset: str | None = None,
    data_root: str | None = None,
    checkpoint: str = "last",
    device: str = "auto",
    ncols: int | None = None,
) -> tuple[Path, DrawnSamples]:
    """Load a run, draw samples with ``options`` from the energy defined by views of ``dataset`` (default: the
    run's training data) and save the grid to ``out`` (default: RUN/plots/samples.png)."""
    if ncols is not None and ncols < 1:
        raise ConfigError(f"--ncols must be >= 1, got {ncols}")
    o = options or SampleOptions()
    model = load_run(run, checkpoint, device)
    info = model.data_info
    spec = dataset or model.cfg.data.dataset
    root = data_root if data_root is not None else model.cfg.data.root
    # the run's policy for unreadable files: the files its pretraining skipped (and listed) are skipped here too
    policy = UnreadableFiles(model.cfg.data.on_unreadable)
    reference = load_dataset(spec, "train", root, False, info.image_size, info.channels, unreadable=policy)
    samples = draw_samples(model, reference, o)
    out = Path(out) if out is not None else RunPaths(Path(run)).plots / "samples.png"
    title = (
        f"{model.cfg.method}: {o.steps} SGLD steps from {o.start}; "
        f"mean energy {samples.initial_energies.mean():.2f} -> {samples.energies.mean():.2f}"
    )
    return save_sample_grid(samples, out, ncols, title), samples
