"""Heads on top of the backbone: projection/predictor MLPs and the TaU temperature head."""

from __future__ import annotations

from torch import nn

from probcl.models.backbones import make_activation


def mlp(
    in_dim: int,
    hidden_dim: int,
    out_dim: int,
    num_layers: int = 2,
    batch_norm: bool = True,
    act: str = "relu",
    last_bias: bool = True,
) -> nn.Sequential:
    """Linear(-BN)-act blocks followed by a final Linear; ``num_layers`` counts the Linear layers."""
    if num_layers < 1:
        raise ValueError(f"an MLP needs at least one layer, got num_layers={num_layers}")
    layers: list[nn.Module] = []
    dim = in_dim
    for _ in range(num_layers - 1):
        layers += [nn.Linear(dim, hidden_dim, bias=not batch_norm)]
        if batch_norm:
            layers.append(nn.BatchNorm1d(hidden_dim))
        layers.append(make_activation(act))
        dim = hidden_dim
    layers.append(nn.Linear(dim, out_dim, bias=last_bias))
    return nn.Sequential(*layers)


def projection_head(
    in_dim: int, hidden_dim: int, out_dim: int, num_layers: int = 2, norm: str = "bn", act: str = "relu"
) -> nn.Sequential:
    """SimCLR-style projection g(h); BatchNorm follows the backbone's ``norm`` switch."""
    return mlp(in_dim, hidden_dim, out_dim, num_layers, batch_norm=norm == "bn", act=act)


def predictor_head(dim: int, hidden_dim: int) -> nn.Sequential:
    """BYOL/SimSiam predictor q: dim -> hidden (BN, ReLU) -> dim."""
    return mlp(dim, hidden_dim, dim, 2, batch_norm=True)


def temperature_head(in_dim: int) -> nn.Linear:
    """TaU post-hoc temperature head: a linear map from frozen features to one raw scalar u, zero at start."""
    head = nn.Linear(in_dim, 1)
    nn.init.zeros_(head.weight)
    nn.init.zeros_(head.bias)
    return head
