"""STL-10: pretraining on ``unlabeled`` + ``train``, probes on ``train``, testing on ``test``, read by
torchvision's STL10 class from a tiny fake ``stl10_binary`` folder in the real file format."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision
from lightning.pytorch.callbacks import Callback

from probcl.data.loaders import load_dataset
from probcl.errors import DatasetError

COUNTS = {"train": 10, "unlabeled": 6, "test": 4}


def _images(count: int, seed: int) -> np.ndarray:
    """(N, 3, 96, 96) uint8 images with an orientation mark: row 0 bright, column 0 dark."""
    images = np.random.default_rng(seed).integers(60, 200, (count, 3, 96, 96), dtype=np.uint8)
    images[:, :, 0, :], images[:, :, :, 0] = 255, 0
    return images


@pytest.fixture
def fake_stl10(tmp_path, monkeypatch):
    """STL-10's binary layout: images stored channel by channel, column-major; labels 1..10 as bytes."""
    folder = tmp_path / "stl10_binary"
    folder.mkdir()
    data = {split: _images(n, seed) for seed, (split, n) in enumerate(COUNTS.items())}
    labels = {"train": np.arange(10, dtype=np.uint8) % 10, "test": np.array([3, 1, 4, 1], dtype=np.uint8)}
    for split, images in data.items():
        (folder / f"{split}_X.bin").write_bytes(np.ascontiguousarray(images.transpose(0, 1, 3, 2)).tobytes())
    for split, y in labels.items():
        (folder / f"{split}_y.bin").write_bytes((y + 1).tobytes())
    (folder / "class_names.txt").write_text("\n".join(f"class{i}" for i in range(10)) + "\n")
    # torchvision checks the md5 sums of the real 2.6 GB files; everything else below is its reading code
    monkeypatch.setattr(torchvision.datasets.STL10, "_check_integrity", lambda self: True)
    return tmp_path, data, labels


def test_pretrain_split_is_train_then_unlabeled(fake_stl10):
    root, data, labels = fake_stl10
    pretrain = load_dataset("stl10", "pretrain", root=str(root))
    train, test = load_dataset("stl10", "train", root=str(root)), load_dataset("stl10", "test", root=str(root))
    assert (len(pretrain), len(train), len(test)) == (16, 10, 4)
    assert torch.equal(pretrain.images, torch.from_numpy(np.concatenate([data["train"], data["unlabeled"]])))
    assert torch.equal(test.images, torch.from_numpy(data["test"]))  # pixels and orientation as written
    assert pretrain.labels().tolist() == labels["train"].tolist() + [-1] * 6
    assert test.labels().tolist() == [3, 1, 4, 1] and pretrain.num_classes == train.num_classes == 10
    assert len(load_dataset("stl10", "all", root=str(root))) == 14  # train + test: no unlabeled images
    filtered = load_dataset("stl10:classes=0-4", "pretrain", root=str(root))  # labeled images of those classes
    assert filtered.labels().tolist() == [0, 1, 2, 3, 4]
    assert len(load_dataset("digits", "pretrain")) == len(load_dataset("digits", "train"))


def test_missing_stl10_says_how_to_get_it(tmp_path):
    with pytest.raises(DatasetError, match="stl10 not found .*--download"):
        load_dataset("stl10", "pretrain", root=str(tmp_path))


class _Seen(Callback):
    def on_train_start(self, trainer, pl_module):
        from probcl.tasks.pretrain import OnlineMonitor

        self.train = trainer.train_dataloader.dataset
        self.monitor = next(c for c in trainer.callbacks if isinstance(c, OnlineMonitor))


def test_pretraining_uses_unlabeled_images_and_probes_use_train(fake_stl10, tiny_config):
    from probcl.eval import ModelOnData
    from probcl.tasks.pretrain import pretrain

    root, _, _ = fake_stl10
    cfg = tiny_config(
        "simclr",
        **{
            "data.dataset": "stl10",
            "data.root": str(root),
            "data.image_size": 32,
            "model.width": 8,
            "train.batch_size": 8,
            "train.limit_train_batches": None,
        },
    )
    seen = _Seen()
    run = pretrain(cfg, callbacks=[seen])
    assert len(seen.train) == 16 and int((seen.train.labels() == -1).sum()) == 6
    assert len(seen.monitor.train) == 10 and bool((seen.monitor.train.labels() >= 0).all())  # labeled only
    assert len(seen.monitor.test) == 4
    ctx = ModelOnData(run, device="cpu")
    assert len(ctx.dataset(None, "train")) == 10 and len(ctx.dataset(None, "test")) == 4
    assert ctx.dataset(None, "train").images.shape[1:] == (3, 32, 32)
