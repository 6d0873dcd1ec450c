"""Histograms of local Lipschitz estimates for one or several runs (the CEB paper's Figures 3-4)."""
from __future__ import annotations

import io
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from probcl.core.io import atomic_write
from probcl.report.plots import save_figure
from probcl.core.runs import RunPaths

QUANTITIES = {"sampled": "|log e(z|x) - log e(z|x+dx)| / ||dx||  (Eq. 19)",
              "kl_bound": "sqrt(max KL) / ||dx||  (Eq. 36)"}


def save_lipschitz_values(path: str | Path, values: Mapping[str, Mapping[str, torch.Tensor]]) -> Path:
    """Write per-pair values ``{perturbation: {quantity: tensor}}`` to an .npz file (atomically)."""
    arrays = {f"{quantity}:{name}": np.asarray(v.cpu(), dtype=np.float32)
              for name, per in values.items() for quantity, v in per.items()}
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    atomic_write(path, lambda fh: fh.write(buffer.getvalue()))
    return Path(path)


def load_lipschitz_values(run: str | Path) -> dict[str, dict[str, np.ndarray]]:
    """The per-pair values the ``lipschitz`` suite stored for a run."""
    path = RunPaths(Path(run)).plots / "lipschitz.npz"
    if not path.exists():
        raise FileNotFoundError(f"{path} missing: run `probcl evaluate {run} --suite lipschitz` first")
    out: dict[str, dict[str, np.ndarray]] = {}
    with np.load(path) as data:
        for key in data.files:
            quantity, name = key.split(":", 1)
            out.setdefault(name, {})[quantity] = data[key]
    return out


def plot_lipschitz_histograms(runs: Mapping[str, str | Path] | Sequence[str | Path], path: str | Path,
                              quantity: str = "sampled", bins: int = 40, title: str = "") -> Path:
    """One panel per perturbation; each run's histogram of ``quantity`` with its mean in the legend.

    ``runs``: ``{label: run_dir}`` or a list of run directories (labelled by folder name).
    Lower values = smoother encoder.
    """
    if quantity not in QUANTITIES:
        raise ValueError(f"quantity must be one of {', '.join(QUANTITIES)}, got {quantity!r}")
    labelled = dict(runs) if isinstance(runs, Mapping) else {Path(r).name: r for r in runs}
    values = {label: load_lipschitz_values(run) for label, run in labelled.items()}
    names = list(dict.fromkeys(n for per_run in values.values() for n in per_run))
    cols = min(4, len(names))
    rows = -(-len(names) // cols)
    fig = Figure(figsize=(3.3 * cols, 2.7 * rows))
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, name in zip(axes, names):
        series = {label: v[name][quantity] for label, v in values.items() if name in v and len(v[name][quantity])}
        if not series:
            ax.set_visible(False)
            continue
        top = max(float(np.quantile(s, 0.99)) for s in series.values())
        edges = np.linspace(0.0, top if top > 0 else 1.0, bins + 1)
        for label, s in series.items():
            ax.hist(np.clip(s, 0.0, edges[-1]), bins=edges, alpha=0.5, density=True,
                    label=f"{label} (mu={s.mean():.3g})")
        ax.set(title=name, xlabel="local Lipschitz estimate", ylabel="density")
        ax.legend(fontsize=7)
    for ax in axes[len(names):]:
        ax.set_visible(False)
    note = "last bin: values above the 99th percentile; lower = smoother"
    fig.suptitle(f"{title or QUANTITIES[quantity]}\n({note})", fontsize=9)
    return save_figure(fig, path)
