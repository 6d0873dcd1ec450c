"""The OOD battery's generated sets and the held-out-class filter, against hand-computed expectations."""

from __future__ import annotations

import pytest
import torch

from probcl.data.loaders import load_dataset
from probcl.data.ood_sets import GENERATED, generated_set
from probcl.data.sources import TensorImages
from probcl.errors import DatasetError


@pytest.fixture
def reference() -> TensorImages:
    g = torch.Generator().manual_seed(0)
    return TensorImages(torch.randint(0, 256, (6, 1, 28, 28), generator=g, dtype=torch.uint8), torch.arange(6), "ref")


@pytest.mark.parametrize("kind", GENERATED)
def test_every_generated_set_matches_the_reference_shape_and_is_seeded(kind, reference):
    a, b = generated_set(kind, reference, 3), generated_set(kind, reference, 3)
    assert a.images.shape == reference.images.shape and a.images.dtype == torch.uint8 and a.labels() is None
    assert torch.equal(a.images, b.images)


def test_blank_images_are_constant_and_low_contrast_keeps_the_mean(reference):
    blank = generated_set("blank", reference).images.float()
    assert (blank.flatten(1).std(1) == 0).all()
    low = generated_set("low-contrast", reference).images.float()
    x = reference.images.float()
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    assert (low - ((x - mean) * 0.1 + mean)).abs().max() <= 0.5  # rounding only


def test_blur_preserves_a_constant_image_and_smooths_edges():
    flat = TensorImages(torch.full((1, 1, 28, 28), 77, dtype=torch.uint8), None, "flat")
    assert (generated_set("blurred", flat).images == 77).all()
    step = torch.zeros(1, 1, 28, 28, dtype=torch.uint8)
    step[..., 14:] = 255
    out = generated_set("blurred", TensorImages(step, None, "step")).images.float()
    assert 0 < out[0, 0, 0, 13] < 255 and out[0, 0, 0, 0] < out[0, 0, 0, 13] < out[0, 0, 0, 14] < out[0, 0, 0, 27]


def test_colour_blocks_are_other_sized_colour_images_converted_to_the_reference():
    rgb_ref = TensorImages(torch.zeros(4, 3, 32, 32, dtype=torch.uint8), None, "rgb")
    blocks = generated_set("colour-blocks", rgb_ref).images
    assert blocks.shape == (4, 3, 32, 32)
    assert torch.unique(blocks[0].flatten(1), dim=1).shape[1] >= 6  # many distinct colours, not a grey image


def test_class_filter_keeps_and_relabels_classes_in_the_given_order():
    digits = load_dataset("digits", "test")
    kept = load_dataset("digits:classes=8,9,3", "test")
    labels = digits.labels()
    expected = torch.cat([torch.nonzero(labels == c).flatten() for c in (8, 9, 3)]).sort().values
    assert torch.equal(kept.images, digits.images[expected])
    remap = {8: 0, 9: 1, 3: 2}
    assert kept.labels().tolist() == [remap[int(c)] for c in labels[expected]]
    assert kept.num_classes == 3 and kept.name == "digits:classes=8,9,3"
    train = load_dataset("digits:classes=0-7", "train")
    assert set(train.labels().tolist()) == set(range(8)) and train.num_classes == 8


@pytest.mark.parametrize("spec", ["digits:classes=", "digits:classes=a-b", "digits:classes=12"])
def test_bad_class_filters_name_the_problem(spec):
    with pytest.raises(DatasetError, match="classes"):
        load_dataset(spec, "test")
