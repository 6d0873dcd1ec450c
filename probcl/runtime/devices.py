"""The device a command runs on: ``auto`` is CUDA when present, else the CPU."""

from __future__ import annotations

import torch

from probcl.errors import ConfigError


def resolve_device(name: str | None = "auto") -> torch.device:
    """``auto`` -> CUDA when present, else CPU; any other name is passed to torch.device. A name torch does
    not know, or a CUDA device this machine lacks, is a ConfigError naming the choices."""
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(str(name))
    except RuntimeError:
        raise ConfigError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"device {name!r} needs a CUDA GPU and this machine has none; use --device cpu or auto")
        if device.index is not None and device.index >= count:
            raise ConfigError(f"device {name!r}: this machine has {count} CUDA GPU(s), cuda:0..cuda:{count - 1}")
    return device
