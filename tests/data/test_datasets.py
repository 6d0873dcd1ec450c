"""Dataset loaders on real (Fashion-MNIST, digits) and generated data, and their error messages."""

import gzip
import struct

import numpy as np
import pytest
import torch
from PIL import Image

from probcl.data.builtin import read_idx
from probcl.data.loaders import load_dataset
from probcl.data.sources import labeled_subset
from probcl.data.unreadable import UnreadableFiles
from probcl.errors import DatasetError


def write_idx(path, array: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(path, "wb") as fh:
        fh.write(header + array.astype(np.uint8).tobytes())


def test_fashion_mnist_known_facts():
    train = load_dataset("fashion-mnist", "train")
    test = load_dataset("fashion-mnist", "test")
    assert len(train) == 60000 and len(test) == 10000
    assert train.images.shape == (60000, 1, 28, 28) and train.images.dtype == torch.uint8
    assert train.num_classes == 10
    assert torch.equal(torch.bincount(train.labels()), torch.full((10,), 6000))
    assert torch.equal(torch.bincount(test.labels()), torch.full((10,), 1000))


def test_idx_round_trip_and_truncated_file(tmp_path):
    images = np.arange(2 * 3 * 4).reshape(2, 3, 4) % 256
    write_idx(tmp_path / "a.gz", images)
    assert np.array_equal(read_idx(tmp_path / "a.gz"), images)
    with gzip.open(tmp_path / "b.gz", "wb") as fh:  # header claims 24 bytes, holds 5
        fh.write(bytes([0, 0, 8, 3]) + struct.pack(">3I", 2, 3, 4) + b"12345")
    with pytest.raises(DatasetError, match="truncated"):
        read_idx(tmp_path / "b.gz")


def test_data_root_layout_and_missing_dataset(tmp_path, monkeypatch):
    monkeypatch.delenv("PROBCL_DATA", raising=False)
    with pytest.raises(DatasetError, match="--download"):
        load_dataset("mnist", "train", root=str(tmp_path))
    rng = np.random.default_rng(0)
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", rng.integers(0, 256, (5, 28, 28)))
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.array([0, 1, 2, 3, 4]))
    data = load_dataset("mnist", "train", root=str(tmp_path))
    assert len(data) == 5 and data[3][1] == 3


def test_digits_resized_split_and_conversion():
    train, test = load_dataset("digits", "train"), load_dataset("digits", "test")
    assert len(train) + len(test) == 1797 and train.images.shape[1:] == (1, 28, 28)
    rgb = load_dataset("digits", "test", image_size=32, channels=3)
    assert rgb.images.shape[1:] == (3, 32, 32)
    assert torch.equal(rgb.images[:, 0], rgb.images[:, 2])


def test_npz_valid_and_invalid(tmp_path):
    x = np.random.default_rng(0).integers(0, 256, (10, 8, 8, 3), dtype=np.uint8)
    np.savez(tmp_path / "ok.npz", x=x, y=np.arange(10) % 2)
    train, test = (
        load_dataset(f"npz:{tmp_path / 'ok.npz'}", "train"),
        load_dataset(f"npz:{tmp_path / 'ok.npz'}", "test"),
    )
    assert len(train) + len(test) == 10 and train.images.shape[1:] == (3, 8, 8)
    np.savez(tmp_path / "float.npz", x=x.astype(np.float32))
    with pytest.raises(DatasetError, match="uint8"):
        load_dataset(f"npz:{tmp_path / 'float.npz'}")
    np.savez(tmp_path / "shape.npz", x=x[:, :, :, :2])
    with pytest.raises(DatasetError, match="shape"):
        load_dataset(f"npz:{tmp_path / 'shape.npz'}")
    np.savez(tmp_path / "labels.npz", x=x, y=np.arange(3))
    with pytest.raises(DatasetError, match="'y'"):
        load_dataset(f"npz:{tmp_path / 'labels.npz'}")
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset(f"npz:{tmp_path / 'missing.npz'}")


def test_npz_split_all_is_x_then_x_test(tmp_path):
    """A file with its own test images: `all` (what `probcl score` reads by default) holds every image of the
    file, x then x_test, labels with them; `train` and `test` are exactly x and x_test."""
    rng = np.random.default_rng(1)
    x, x_test = (rng.integers(0, 256, (n, 6, 6), dtype=np.uint8) for n in (7, 4))
    y, y_test = np.arange(7) % 3, np.array([4, 0, 1, 2])
    np.savez(tmp_path / "both.npz", x=x, y=y, x_test=x_test, y_test=y_test)
    spec = f"npz:{tmp_path / 'both.npz'}"
    every = load_dataset(spec, "all")
    assert np.array_equal(every.images[:, 0].numpy(), np.concatenate([x, x_test]))
    assert np.array_equal(every.labels().numpy(), np.concatenate([y, y_test])) and every.num_classes == 5
    assert np.array_equal(load_dataset(spec, "test").images[:, 0].numpy(), x_test)
    assert np.array_equal(load_dataset(spec, "train").images[:, 0].numpy(), x)
    np.savez(tmp_path / "test-unlabeled.npz", x=x, y=y, x_test=x_test)
    assert load_dataset(f"npz:{tmp_path / 'test-unlabeled.npz'}", "all").labels() is None
    np.savez(tmp_path / "sizes.npz", x=x, x_test=rng.integers(0, 256, (4, 5, 5), dtype=np.uint8))
    with pytest.raises(DatasetError, match=r"splits hold images of different shapes \(\(1, 5, 5\) and \(1, 6, 6\)"):
        load_dataset(f"npz:{tmp_path / 'sizes.npz'}", "all")
    np.savez(tmp_path / "float-test.npz", x=x, x_test=x_test.astype(np.float64))
    with pytest.raises(DatasetError, match="'x_test' has dtype float64"):
        load_dataset(f"npz:{tmp_path / 'float-test.npz'}", "all")


def _write_png(path, value, mode="RGB"):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, (12, 12), value).save(path)


def test_folder_with_classes_flat_and_corrupt(tmp_path):
    for cls, value in (("cat", (255, 0, 0)), ("dog", (0, 0, 255))):
        for i in range(5):
            _write_png(tmp_path / "labeled" / cls / f"{i}.png", value)
    data = load_dataset(f"folder:{tmp_path / 'labeled'}", "all", image_size=16)
    assert len(data) == 10 and data.num_classes == 2 and data.classes == ["cat", "dog"]
    image, label, _ = data[7]
    assert image.shape == (3, 16, 16) and label == 1 and image[2].float().mean() > 250
    for i in range(4):
        _write_png(tmp_path / "flat" / f"{i}.png", 128, mode="L")
    flat = load_dataset(f"folder:{tmp_path / 'flat'}", "all", image_size=8)
    assert flat.labels() is None and flat.channels == 1 and flat[0][1] == -1
    (tmp_path / "flat" / "broken.png").write_bytes(b"not an image")
    with pytest.raises(DatasetError, match=r"1 of the 5 image files .* cannot be read: .*broken\.png \(cannot"):
        load_dataset(f"folder:{tmp_path / 'flat'}", "all", image_size=8)  # a library call's policy: error
    skipped = UnreadableFiles("skip")
    kept = load_dataset(f"folder:{tmp_path / 'flat'}", "all", image_size=8, unreadable=skipped)
    assert len(kept) == 4 and list(skipped.found) == [str(tmp_path / "flat" / "broken.png")]
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset(f"folder:{tmp_path / 'nope'}")


def test_labeled_subset_is_stratified_and_seeded():
    labels = torch.arange(1000) % 10
    idx = labeled_subset(labels, 0.1, seed=1)
    assert len(idx) == 100 and torch.equal(torch.bincount(labels[idx]), torch.full((10,), 10))
    assert torch.equal(idx, labeled_subset(labels, 0.1, seed=1))
    assert not torch.equal(idx, labeled_subset(labels, 0.1, seed=2))
    assert len(labeled_subset(labels, 0.001, seed=0)) == 10  # at least one per class


def test_unknown_dataset_lists_choices():
    from probcl.core.registry import UnknownNameError

    with pytest.raises(UnknownNameError, match="fashion-mnist"):
        load_dataset("imagenet-42")


def test_a_folder_spec_naming_a_file_says_it_is_a_file(tmp_path):
    Image.new("L", (8, 8)).save(tmp_path / "noise-0.png")
    with pytest.raises(DatasetError, match=r"noise-0.png is a file, not a folder: .*folder:" + str(tmp_path)):
        load_dataset(f"folder:{tmp_path / 'noise-0.png'}", "test")


def test_an_unknown_dataset_that_is_a_path_names_the_prefix_it_lacks(tmp_path):
    from probcl.data.specs import SPEC_FORMS, unknown_dataset_message

    (tmp_path / "images").mkdir()
    (tmp_path / "arrays.npz").write_bytes(b"")
    names = ["digits", "mnist"]
    plain = unknown_dataset_message("nope", names)
    assert plain == f"unknown dataset 'nope'; valid choices: digits, mnist, or {', '.join(SPEC_FORMS)}"
    images, arrays = str(tmp_path / "images"), str(tmp_path / "arrays.npz")
    assert unknown_dataset_message(images, names) == f"{plain.replace('nope', images)}. {images} is a folder: " + (
        f"pass --dataset folder:{images}"
    )
    assert unknown_dataset_message(arrays, names).endswith(f"{arrays} is an array file: pass --dataset npz:{arrays}")
