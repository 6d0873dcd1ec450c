"""Tiny models for the method tests: a 4-channel CNN on 12x12 single-channel inputs."""

from __future__ import annotations

import torch

from probcl.config import load_config
from probcl.methods import METHODS, SSLMethod
from tests.conftest import TINY_MODEL

DATA_INFO = dict(dataset="digits", channels=1, image_size=12, num_classes=None, mean=[0.5], std=[0.5])


def build(method: str, batch_size: int = 8, **method_args) -> SSLMethod:
    """A freshly seeded ``method`` in train mode, built from a validated Config."""
    torch.manual_seed(0)
    overrides = {
        "method": method,
        **TINY_MODEL,
        "train.batch_size": batch_size,
        **{f"method_args.{k}": v for k, v in method_args.items()},
    }
    return METHODS.get(method)(load_config(None, overrides), DATA_INFO).train()


def views(n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 1, 12, 12, generator=g), torch.randn(n, 1, 12, 12, generator=g)
