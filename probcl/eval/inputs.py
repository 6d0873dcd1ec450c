"""What the suites feed a model: the seeded in-memory test subset, and any image set through the probe."""

from __future__ import annotations

import torch

from probcl.data.sources import ImageSource, TensorImages
from probcl.errors import ConfigError
from probcl.eval.context import ModelOnData

IN_MEMORY_BYTES = 2 << 30  # decoded uint8 test images a perturbing suite may hold (it makes a few copies of them)


def id_test_images(
    ctx: ModelOnData, suite: str, max_images: int | None, seed: int
) -> tuple[TensorImages, torch.Tensor]:
    """The in-distribution test set (or a seeded subset of it) held in memory, and the indices taken.

    The perturbing suites (``suite``: ood, corruptions, adversarial, lipschitz) change pixels of whole arrays, so a
    test split streamed from files is decoded into memory first, when its uint8 pixels fit in
    :data:`IN_MEMORY_BYTES` (a note says so); a larger one is one ConfigError naming the ``max_images`` that fits."""
    data = ctx.dataset(None, "test")
    idx = data.seeded_indices(max_images, seed)
    return _in_memory(ctx, suite, data, idx), idx


def _in_memory(ctx: ModelOnData, suite: str, data: ImageSource, idx: torch.Tensor) -> TensorImages:
    """The images ``idx`` of ``data`` held in memory (decoded once per context when streamed)."""
    chosen = data if len(idx) == len(data) else data.subset(idx)
    if isinstance(chosen, TensorImages):
        return chosen
    decoded = ctx.cached(("in-memory test", tuple(idx.tolist())), lambda: _decoded(ctx, chosen, suite))
    ctx.note(
        f"{suite}: the {len(chosen)} test images of {data.name} (streamed from files) were decoded into memory "
        f"({_mib(chosen)} MiB) to be perturbed"
    )
    return decoded


def _decoded(ctx: ModelOnData, data: ImageSource, suite: str) -> TensorImages:
    per_image = data.channels * data.image_size**2
    if len(data) * per_image > IN_MEMORY_BYTES:
        raise ConfigError(
            f"suite {suite} perturbs the test images in memory, and the {len(data)} of {data.name} take "
            f"{_mib(data)} MiB decoded (more than {IN_MEMORY_BYTES / (1 << 20):.3g} MiB); pass --option "
            f"{suite}.max_images={IN_MEMORY_BYTES // per_image} (a seeded subset that fits)"
        )
    return data.to_memory(ctx.num_workers, ctx.batch_size)


def _mib(data: ImageSource) -> str:
    return f"{len(data) * data.channels * data.image_size**2 / (1 << 20):.3g}"


def calibration_halves(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted indices of the two halves of a seeded permutation of ``count`` ID test images: (calibration,
    held out). OOD scores fit their tails and thresholds on the first half and are evaluated on the second, so
    the ID acceptance they report is out of sample (the ``ood`` suite, ``benchmarks/ood_battery.py``)."""
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed))
    half = count // 2
    return order[:half].sort().values, order[half:].sort().values


def id_test_halves(
    ctx: ModelOnData, suite: str, max_images: int | None, seed: int
) -> tuple[TensorImages, TensorImages, torch.Tensor]:
    """The ID test set cut by :func:`calibration_halves`, each half a seeded subset of at most ``max_images``
    held in memory as :func:`id_test_images` holds it: (calibration images, held-out images, the held-out
    images' indices in the test set)."""
    data = ctx.dataset(None, "test")
    calibration, held_out = (
        idx[data.subset(idx).seeded_indices(max_images, seed)] for idx in calibration_halves(len(data), seed)
    )
    return _in_memory(ctx, suite, data, calibration), _in_memory(ctx, suite, data, held_out), held_out


def probe_logits(ctx: ModelOnData, data: ImageSource, description: str) -> torch.Tensor:
    """Logits of the context's offline linear probe on any dataset."""
    _, probe = ctx.linear_probe()
    return probe.logits(ctx.extract(data, description)[0])
