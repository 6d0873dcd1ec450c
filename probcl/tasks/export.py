"""`probcl export`: a run's backbone weights as a plain state_dict (safetensors or torch .pt).

ResNet backbones keep torchvision's parameter names (``fc`` is dropped), so the file
loads into ``torchvision.models.resnet18()`` with ``strict=False`` once ``conv1`` and
``maxpool`` match the run's stem; the sidecar JSON states the architecture.
"""
from __future__ import annotations

from pathlib import Path

import torch

from probcl.config import to_plain
from probcl.core.io import atomic_write, atomic_write_json
from probcl.core.runs import load


def export_backbone(run: str | Path, out: str | Path | None = None, fmt: str = "safetensors") -> Path:
    """Write the backbone state_dict of ``run`` and an ``.json`` sidecar; returns the weights path."""
    model = load(run, device="cpu")
    suffix = ".safetensors" if fmt == "safetensors" else ".pt"
    run_root = Path(run) if Path(run).is_dir() else Path(run).parent
    out = Path(out) if out else run_root / f"backbone{suffix}"
    state = {k: v.detach().contiguous().clone() for k, v in model.backbone.state_dict().items()}
    if fmt == "safetensors":
        from safetensors.torch import save

        payload = save(state, metadata={"format": "pt"})
        atomic_write(out, lambda fh: fh.write(payload))
    else:
        atomic_write(out, lambda fh: torch.save(state, fh))
    atomic_write_json(out.with_suffix(".json"), {
        "method": model.cfg.method, "model": to_plain(model.cfg.model), "in_channels": model.data_info.channels,
        "feature_dim": model.feature_dim, "normalization": {"mean": model.data_info.mean, "std": model.data_info.std},
        "image_size": model.data_info.image_size,
    })
    return out
