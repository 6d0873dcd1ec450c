"""Folders stream: file names are listed once, images are decoded per batch in DataLoader workers, and
pretraining on a streamed folder equals pretraining on the same images in memory, killed and resumed or not."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from probcl.data.decoding import CorruptImageError
from probcl.data.folders import FolderImages
from probcl.data.loaders import load_dataset
from probcl.data.sources import TensorImages
from probcl.errors import DatasetError
from tests.runs.test_resume import KillAt, Killed, assert_same_run


def _save(path: Path, image: torch.Tensor) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(image[0].numpy()).save(path)


@pytest.fixture(scope="module")
def digits_folder(tmp_path_factory) -> tuple[Path, TensorImages]:
    """128 training and 40 test images of scikit-learn's digits as PNG files under train/<class>/ and val/<class>/
    (ImageNet's layout), and the training images in the order the folder lists them."""
    root = tmp_path_factory.mktemp("digits-folder")
    train, test = load_dataset("digits", "train").subset(range(128)), load_dataset("digits", "test").subset(range(40))
    order = []
    for split, data in (("train", train), ("val", test)):
        for i in range(len(data)):
            image, label, _ = data[i]
            _save(root / split / f"digit-{label}" / f"{i:04d}.png", image)
            if split == "train":
                order.append((f"digit-{label}", f"{i:04d}.png", i))
    index = [i for *_, i in sorted(order)]  # paths sort by class folder, then file name
    return root, train.subset(index)


def test_folder_lists_labels_in_path_order_and_streams(digits_folder):
    root, expected = digits_folder
    streamed = load_dataset(f"folder:{root}", "train", image_size=28)
    assert isinstance(streamed, FolderImages) and len(streamed) == 128
    assert streamed.classes == [f"digit-{c}" for c in range(10)]
    assert torch.equal(streamed.labels(), expected.labels())
    assert [p.name for p in streamed.paths][:2] == sorted(p.name for p in (root / "train" / "digit-0").iterdir())[:2]
    test = load_dataset(f"folder:{root}", "test", image_size=28)  # val/ is the test split
    assert len(test) == 40 and str(test.paths[0]).startswith(str(root / "val"))
    memory = load_dataset(f"folder:{root}:stream=false", "train", image_size=28)
    assert isinstance(memory, TensorImages) and torch.equal(memory.images, expected.images)
    batches = list(DataLoader(streamed, batch_size=50, num_workers=2))  # decoded in two worker processes
    assert torch.equal(torch.cat([b[0] for b in batches]), expected.images)
    assert torch.equal(streamed.subset([5, 3]).to_memory().images, expected.images[[5, 3]])
    with pytest.raises(DatasetError, match="stream must be true or false"):
        load_dataset(f"folder:{root}:stream=maybe")


def test_nested_names_sort_as_paths(tmp_path):
    """'a/x.png' comes before 'a-b/x.png' as paths (part by part), not as strings ('-' < '/')."""
    for name in ("a-b/1.png", "a/2.png", "a/1.png", "b/1.png"):
        _save(tmp_path / name, torch.zeros(1, 4, 4, dtype=torch.uint8))
    data = load_dataset(f"folder:{tmp_path}", "all", image_size=4)
    reference = sorted(p for p in tmp_path.rglob("*.png"))
    assert list(data.paths) == reference and data.classes == ["a", "a-b", "b"]
    assert data.labels().tolist() == [0, 0, 1, 2]
    part = data.subset([3, 0, 0])
    assert list(part.paths) == [reference[3], reference[0], reference[0]] and part.labels().tolist() == [2, 0, 0]


def test_image_damaged_past_its_header_fails_in_a_worker_as_one_line(tmp_path, capsys):
    """A JPEG cut short passes the up-front check (its header is intact; JPEG has no checksums) and fails when a
    worker decodes it: one line naming the file, in the loader and in `probcl pretrain`."""
    from probcl.cli import main

    for split, count in (("train", 12), ("test", 3)):
        for i in range(count):
            _save(tmp_path / "imgs" / split / f"{i:02d}.png", torch.full((1, 8, 8), 10 * i, dtype=torch.uint8))
    noise = torch.randint(0, 256, (64, 64), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    Image.fromarray(noise.numpy()).save(tmp_path / "cut.jpg")
    whole = (tmp_path / "cut.jpg").read_bytes()
    (tmp_path / "imgs" / "train" / "05.png").unlink()
    (tmp_path / "imgs" / "train" / "05.jpg").write_bytes(whole[: len(whole) * 3 // 4])
    data = load_dataset(f"folder:{tmp_path / 'imgs'}", "train", image_size=8)  # the check passes it
    assert len(data) == 12
    with pytest.raises(CorruptImageError) as caught:
        list(DataLoader(data, batch_size=4, num_workers=1))
    assert re.fullmatch(
        r"cannot read image .*05\.jpg: image file is truncated.*Remove or replace this file", str(caught.value)
    )
    assert "Traceback" not in str(caught.value) and "\n" not in str(caught.value)
    code = main(
        [
            "pretrain",
            "--run-dir",
            str(tmp_path / "run"),
            "--dataset",
            f"folder:{tmp_path / 'imgs'}",
            "--num-workers",
            "1",
            "--batch-size",
            "4",
            "--epochs",
            "1",
        ]
    )
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err and re.search(r"cannot read image .*05\.jpg", err)


RUN = {
    "train.epochs": 2,
    "train.batch_size": 16,
    "train.limit_train_batches": 4,
    "train.checkpoint_every_n_steps": 2,
    "model.width": 8,
}


@pytest.fixture
def one_torch_thread():
    """Loader workers next to a multi-threaded main process on 2 shared cores cost 10x in thread contention."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_streamed_pretraining_equals_in_memory_and_resumes_exactly(digits_folder, tiny_config, one_torch_thread):
    """Same per-sample views from workers as from memory (bit-identical checkpoints and metrics); a run of
    the streamed folder killed mid-epoch and resumed ends identical too."""
    from probcl.tasks.pretrain import pretrain

    root, _ = digits_folder
    streamed = {"data.dataset": f"folder:{root}", "data.image_size": 28, "data.num_workers": 2, **RUN}
    reference = pretrain(tiny_config("simclr", "streamed", **streamed))
    memory = pretrain(
        tiny_config(
            "simclr", "memory", **{**streamed, "data.dataset": f"folder:{root}:stream=false", "data.num_workers": 0}
        )
    )
    assert_same_run(reference, memory)
    killed = tiny_config("simclr", "killed", **streamed)  # 4 steps per epoch: step 7 is mid-epoch 2
    with pytest.raises(Killed):
        pretrain(killed, callbacks=[KillAt(7, "batch")])
    assert torch.load(Path(killed.run_dir) / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 6
    pretrain(killed)
    assert_same_run(reference, Path(killed.run_dir))
