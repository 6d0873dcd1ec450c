"""Encoders: a small CNN for 28x28 inputs, torchvision ResNet-18/50 with an optional CIFAR stem, and any
timm model (``timm:<name>``, optional extra ``timm``).

Every backbone maps (N, C, H, W) to (N, out_dim) features and exposes ``out_dim``.
``norm='none'`` removes normalization layers (convolutions then keep a bias) and
``act='leaky_relu'`` swaps every ReLU for LeakyReLU(0.2), as EBCLR needs. ``dropout2d`` > 0 adds
channel dropout after the first conv-norm-activation of every block (the TaU paper's MC-dropout
baseline); it holds no parameters, so the state_dict is the same as without it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from probcl.config import Config, ModelConfig
from probcl.core.backbone_names import import_timm, resolve_backbone

LEAKY_SLOPE = 0.2


def make_activation(act: str) -> nn.Module:
    return nn.LeakyReLU(LEAKY_SLOPE) if act == "leaky_relu" else nn.ReLU()


def norm_layer_2d(norm: str) -> Callable[[int], nn.Module]:
    return nn.BatchNorm2d if norm == "bn" else (lambda channels: nn.Identity())


def pooling_bins(size: int, out: int) -> list[tuple[int, int]]:
    """The [start, end) input rows averaged into each of ``out`` output rows by adaptive average pooling:
    start = floor(i * size / out), end = ceil((i + 1) * size / out), as ``F.adaptive_avg_pool2d`` takes them."""
    return [((i * size) // out, -(-(i + 1) * size // out)) for i in range(out)]


def _window(bins: list[tuple[int, int]]) -> tuple[int, int] | None:
    """(kernel, stride) of a sliding window that gives exactly ``bins``, or None when their sizes or steps differ."""
    sizes = {end - start for start, end in bins}
    steps = {b[0] - a[0] for a, b in zip(bins, bins[1:])} or {bins[0][1]}
    return (sizes.pop(), steps.pop()) if len(sizes) == len(steps) == 1 else None


class GridAvgPool2d(nn.Module):
    """Average pooling to an ``out`` x ``out`` grid: the numbers of ``nn.AdaptiveAvgPool2d(out)`` (up to float
    rounding), computed with ops every ONNX runtime has.

    ONNX has no adaptive pooling: torch's exporter handles only output sizes that divide the input (28 px inputs
    give a 7x7 map, pooled to 2x2). Where the bins share one size and step (7 -> 2: rows 0-3 and 3-6) this is
    one ``avg_pool2d`` (ONNX AveragePool); otherwise each grid cell is the mean of its slice. The tests compare it
    with ``F.adaptive_avg_pool2d`` on the presets' feature-map sizes."""

    def __init__(self, out: int) -> None:
        super().__init__()
        self.out = out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.out == 1:  # global pooling (ONNX ReduceMean)
            return x.mean((-2, -1), keepdim=True)
        rows, cols = pooling_bins(int(x.shape[-2]), self.out), pooling_bins(int(x.shape[-1]), self.out)
        row_window, col_window = _window(rows), _window(cols)
        if row_window and col_window:
            return F.avg_pool2d(x, (row_window[0], col_window[0]), (row_window[1], col_window[1]))
        cells = [torch.stack([x[..., a:b, c:d].mean((-2, -1)) for c, d in cols], -1) for a, b in rows]
        return torch.stack(cells, -2)

    def extra_repr(self) -> str:
        return f"out={self.out}"


class SmallCNN(nn.Module):
    """Five 3x3 conv blocks (widths w, 2w, 2w, 4w, 4w; two stride-2 steps) + average pool to a
    ``pool`` x ``pool`` grid (1: global pool), flattened: ``4 * width * pool**2`` features.

    A 2x2 grid keeps where on a 28x28 garment a part is (collar, sleeves, sole), which a linear probe uses."""

    def __init__(
        self,
        in_channels: int = 1,
        width: int = 32,
        norm: str = "bn",
        act: str = "relu",
        pool: int = 1,
        dropout2d: float = 0.0,
    ) -> None:
        super().__init__()
        widths = [width, 2 * width, 2 * width, 4 * width, 4 * width]
        strides = [1, 2, 1, 2, 1]
        layers: list[nn.Module] = []
        c_in = in_channels
        for c_out, stride in zip(widths, strides):
            activation = make_activation(act)
            layers += [
                nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=norm == "none"),
                norm_layer_2d(norm)(c_out),
                nn.Sequential(activation, nn.Dropout2d(dropout2d)) if dropout2d > 0 else activation,
            ]
            c_in = c_out
        self.features = nn.Sequential(*layers)
        self.pool = GridAvgPool2d(pool)
        self.out_dim = c_in * pool * pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.features(x)).flatten(1)


def _swap_relu(module: nn.Module, act: str) -> None:
    for name, child in module.named_children():
        if isinstance(child, nn.ReLU):
            setattr(module, name, make_activation(act))
        else:
            _swap_relu(child, act)


class InputDropoutConv2d(nn.Conv2d):
    """A convolution whose input first goes through channel dropout (Dropout2d); same parameters, same
    state_dict keys as the ``conv`` it replaces (whose weights it takes)."""

    def __init__(self, conv: nn.Conv2d, p: float) -> None:
        super().__init__(
            conv.in_channels,
            conv.out_channels,
            conv.kernel_size,  # type: ignore[arg-type]  # a tuple, as Conv2d stores it
            conv.stride,  # type: ignore[arg-type]
            conv.padding,  # type: ignore[arg-type]
            conv.dilation,  # type: ignore[arg-type]
            conv.groups,
            conv.bias is not None,
        )
        self.load_state_dict(conv.state_dict())
        self.dropout = nn.Dropout2d(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(self.dropout(x))


def resnet(
    depth: int,
    in_channels: int = 3,
    norm: str = "bn",
    act: str = "relu",
    cifar_stem: bool = True,
    dropout2d: float = 0.0,
) -> nn.Module:
    """torchvision ResNet-18/50 without its classifier (``fc`` = Identity), so its state_dict
    loads into ``torchvision.models.resnet{depth}`` with ``strict=False`` (fc missing)."""
    import torchvision

    builder = {18: torchvision.models.resnet18, 50: torchvision.models.resnet50}[depth]
    net = builder(weights=None, norm_layer=norm_layer_2d(norm))
    if cifar_stem:
        net.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=norm == "none")
        net.maxpool = nn.Identity()
    elif in_channels != 3 or norm == "none":
        net.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=norm == "none")
    if norm == "none":
        for m in net.modules():
            if isinstance(m, nn.Conv2d) and m.bias is None:
                m.bias = nn.Parameter(torch.zeros(m.out_channels))
    if act != "relu":
        _swap_relu(net, act)
    if dropout2d > 0:
        for stage in (net.layer1, net.layer2, net.layer3, net.layer4):
            for block in stage:
                block.conv2 = InputDropoutConv2d(block.conv2, dropout2d)  # after conv1-bn1-relu
    net.out_dim = net.fc.in_features
    net.fc = nn.Identity()
    return net


def timm_backbone(name: str, in_channels: int) -> nn.Module:
    """timm's model ``name``, randomly initialised, without classifier (``num_classes=0``: pooled features).

    ``out_dim`` is measured by one forward pass at the model's default input size: timm's
    ``num_features`` is not the pooled output's width for every model (e.g. MobileNetV3's head conv).
    """
    timm = import_timm(f"timm:{name}")
    net = timm.create_model(name, pretrained=False, num_classes=0, in_chans=in_channels)
    cfg = timm.models.get_pretrained_cfg(name)
    size = cfg.input_size[1:] if cfg else (224, 224)
    net.eval()
    with torch.no_grad():
        net.out_dim = net(torch.zeros(1, in_channels, *size)).shape[1]
    return net.train()


def timm_classifier(name: str) -> tuple[str, ...]:
    """Names of the classifier module(s) of timm's model ``name``, as its pretrained config declares them:
    a timm checkpoint holds their weights, a backbone built with ``num_classes=0`` has none."""
    cfg = import_timm(f"timm:{name}").models.get_pretrained_cfg(name)
    classifier = (cfg.classifier if cfg else None) or ()
    return (classifier,) if isinstance(classifier, str) else tuple(classifier)


BUILDERS: dict[str, Callable[[str, ModelConfig, int], nn.Module]] = {
    "cnn": lambda name, cfg, channels: SmallCNN(channels, cfg.width, cfg.norm, cfg.act, cfg.pool, cfg.dropout2d),
    "resnet": lambda name, cfg, channels: resnet(
        int(name.removeprefix("resnet")), channels, cfg.norm, cfg.act, cfg.cifar_stem, cfg.dropout2d
    ),
    "timm": lambda name, cfg, channels: timm_backbone(name, channels),
}  # by family (probcl.core.backbone_names.FAMILIES); torchvision models are built by models.encoder


def build_backbone(cfg: ModelConfig, in_channels: int) -> nn.Module:
    """The backbone named in ``cfg`` for images with ``in_channels`` channels."""
    resolved = resolve_backbone(cfg.backbone)
    return BUILDERS[resolved.family.name](resolved.name, cfg, in_channels)


def memory_format_for(cfg: Config) -> torch.memory_format:
    """channels_last (NHWC) for conv backbones when ``train.channels_last`` is on, else contiguous NCHW.

    Every backbone here is convolutional; oneDNN (CPU) and cuDNN (GPU) run NHWC convolutions faster.
    """
    return torch.channels_last if cfg.train.channels_last else torch.contiguous_format


def backbone_features(
    backbone: nn.Module,
    normalize: Callable[[torch.Tensor], torch.Tensor],
    memory_format: torch.memory_format,
    images: torch.Tensor,
    device: torch.device,
) -> torch.Tensor:
    """A run's features of one uint8 or [0, 1] float batch, with autograd: ``backbone`` on the normalized images in
    ``memory_format``. The one definition a method's ``embed_batch`` and a checkpoint's
    :class:`~probcl.models.checkpoint.RunBackbone` share, so that both give the same features bit for bit."""
    return backbone(normalize(images.to(device)).contiguous(memory_format=memory_format))
