"""Atomic writes: a failed write names the file and the cause, and leaves the previous file as it was."""

from __future__ import annotations

import errno
import os

import pytest

from probcl.core.io import atomic_write, atomic_write_text
from probcl.errors import RunError
from probcl.runtime.torch_files import atomic_torch_save


def test_a_write_replaces_the_file_whole(tmp_path):
    target = tmp_path / "deep" / "folder" / "out.txt"
    atomic_write_text(target, "first\n")
    atomic_write_text(target, "second\n")
    assert target.read_text() == "second\n"
    assert [p.name for p in target.parent.iterdir()] == ["out.txt"]  # no temporary file left


def test_a_broken_symbolic_link_on_the_way_is_named(tmp_path):
    (tmp_path / "out").symlink_to(tmp_path / "gone")
    with pytest.raises(RunError, match=r"out/s\.csv: .*out is a symbolic link to .*gone, which does not"):
        atomic_write_text(tmp_path / "out" / "s.csv", "x\n")
    assert not (tmp_path / "gone").exists()


def test_a_failed_write_keeps_the_previous_file(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("previous\n")

    def disk_full(fh):
        fh.write(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(RunError, match=r"out\.txt: No space left on device\. Nothing was lost.*free disk"):
        atomic_write(target, disk_full)
    assert target.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]  # the temporary file is gone


class _FillsUp:
    """A file that takes ``room`` bytes, then fails every write as a full disk does (ENOSPC)."""

    def __init__(self, fh, room: int):
        self.fh, self.room = fh, room

    def write(self, data) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.fh.write(data)

    def __getattr__(self, name):
        return getattr(self.fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self.fh.__exit__(*exc)


def test_a_tensor_file_on_a_full_disk_gives_the_disk_error_and_keeps_the_previous_file(tmp_path, monkeypatch):
    """torch.save writing into the file itself turns ENOSPC into "RuntimeError: [enforce fail at
    inline_container.cc] unexpected pos"; the file's previous content must stay, and the error must say why."""
    import torch

    target = tmp_path / "last.ckpt"
    atomic_torch_save(target, {"step": 1})
    before = target.read_bytes()
    real_fdopen = os.fdopen
    monkeypatch.setattr("probcl.core.io.os.fdopen", lambda fd, mode: _FillsUp(real_fdopen(fd, mode), 4096))
    with pytest.raises(RunError, match=r"last\.ckpt: No space left on device\. Nothing was lost"):
        atomic_torch_save(target, {"step": 2, "weights": torch.zeros(100_000)})
    monkeypatch.undo()
    assert target.read_bytes() == before and torch.load(target)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_why_torch_load_failed_is_one_clause(tmp_path):
    """A text file, a file cut short, and a pickled module (not tensors): each failure of torch.load becomes one
    line that names the cause and does not pass on torch's advice to load with weights_only=False."""
    import torch

    from probcl.core.io import torch_load_problem

    text = tmp_path / "readme.txt"
    text.write_text("not a checkpoint\n")
    whole = tmp_path / "state.pt"
    torch.save({"w": torch.zeros(1000)}, whole)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(whole.read_bytes()[:500])
    module = tmp_path / "module.pt"
    torch.save(torch.nn.Linear(2, 2), module)
    for path in (text, cut):
        with pytest.raises(Exception) as error:
            torch.load(path, weights_only=True)
        assert torch_load_problem(path, error.value) == (
            "it is not a file torch.save wrote (not a zip archive): wrong file, or cut short"
        )
    with pytest.raises(Exception) as error:
        torch.load(module, weights_only=True)
    problem = torch_load_problem(module, error.value)
    assert (
        problem.startswith("it holds Python objects beside tensors (") and "torch.nn.modules.linear.Linear" in problem
    )
    assert (
        "\n" not in problem and "weights_only" not in problem and problem.endswith("save a state_dict (tensors only)")
    )


def test_a_damaged_safetensors_file_is_not_called_a_torch_save_file(tmp_path):
    """safetensors files are not zip archives: the message for torch.save's files was wrong for them."""
    import pytest
    from safetensors.torch import load_file, save_file

    from probcl.core.io import torch_load_problem

    path = tmp_path / "w.safetensors"
    save_file({"w": __import__("torch").zeros(4, 4)}, str(path))
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(Exception) as error:
        load_file(str(path))
    problem = torch_load_problem(path, error.value)
    assert problem.startswith("it is not a readable safetensors file (") and "zip" not in problem
