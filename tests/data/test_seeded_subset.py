"""Seeded subsets are a method of every image source and pick the same items in memory and on disk."""

import pytest
import torch
from PIL import Image

from probcl.data.loaders import load_dataset
from probcl.data.sources import TensorImages
from probcl.errors import ConfigError


def test_in_memory_and_folder_sources_pick_the_same_items(tmp_path):
    values = torch.arange(10, dtype=torch.uint8) * 20  # image i is a flat image of value 20 i
    for i, v in enumerate(values.tolist()):
        Image.new("L", (4, 4), v).save(tmp_path / f"{i:02d}.png")
    folder = load_dataset(f"folder:{tmp_path}", "all", image_size=4)
    memory = TensorImages(values.view(10, 1, 1, 1).expand(10, 1, 4, 4).clone(), None, "flat")
    for seed in (0, 1):
        a, b = memory.seeded_subset(4, seed), folder.seeded_subset(4, seed)
        assert len(a) == len(b) == 4
        picked = a.images[:, 0, 0, 0]
        assert torch.equal(picked, torch.stack([b[i][0][0, 0, 0] for i in range(4)]))
        assert len(set(picked.tolist())) == 4 and picked.tolist() == sorted(picked.tolist())  # distinct, in order
        assert [b.item_id(i) for i in range(4)] == [str(tmp_path / f"{v // 20:02d}.png") for v in picked.tolist()]
    assert not torch.equal(memory.seeded_subset(4, 0).images, memory.seeded_subset(4, 1).images)
    assert memory.seeded_subset(None, 0) is memory and folder.seeded_subset(10, 3) is folder
    with pytest.raises(ConfigError, match="at least 1 image"):
        memory.seeded_subset(0)
