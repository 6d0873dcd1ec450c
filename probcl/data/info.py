"""What a model needs to know about its training data (:class:`DataInfo`), and how it is measured."""

from __future__ import annotations

from dataclasses import dataclass

from probcl.config import Config
from probcl.data.sources import ImageSource, random_subset

STAT_SAMPLES = 10000  # images used to estimate the per-channel mean/std


@dataclass
class DataInfo:
    """What a model needs to know about its training data; stored in every checkpoint."""

    dataset: str
    channels: int
    image_size: int
    num_classes: int | None
    mean: list[float]
    std: list[float]
    class_names: list[str] | None = None  # the name of each label (a folder's sub-folders); None: numbered only


def data_info_for(cfg: Config, train: ImageSource) -> DataInfo:
    """Channels, size, classes and normalisation statistics of the training data."""
    if cfg.augment.normalize == "symmetric":
        mean, std = [0.5] * train.channels, [0.5] * train.channels
    else:
        sampled = train.subset(random_subset(len(train), min(len(train), STAT_SAMPLES)))
        images = sampled.to_memory(cfg.data.num_workers).images
        pixels = images.float().div(255.0).transpose(0, 1).reshape(train.channels, -1)
        mean, std = pixels.mean(1).tolist(), pixels.std(1).clamp_min(1e-3).tolist()
    return DataInfo(cfg.data.dataset, train.channels, train.image_size, train.num_classes, mean, std, train.class_names)
