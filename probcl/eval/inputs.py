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
    chosen = data if len(idx) == len(data) else data.subset(idx)
    if isinstance(chosen, TensorImages):
        return chosen, idx
    decoded = ctx.cached(("in-memory test", tuple(idx.tolist())), lambda: _decoded(ctx, chosen, suite))
    ctx.note(
        f"{suite}: the {len(chosen)} test images of {data.name} (streamed from files) were decoded into memory "
        f"({_mib(chosen)} MiB) to be perturbed"
    )
    return decoded, idx


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


def probe_logits(ctx: ModelOnData, data: ImageSource, description: str) -> torch.Tensor:
    """Logits of the context's offline linear probe on any dataset."""
    _, probe = ctx.linear_probe()
    return probe.logits(ctx.extract(data, description)[0])
