"""Writes that fail part-way (disk full) keep the previous file intact and the run resumable."""

import errno
import json
import os
import tempfile

import pytest
import torch

from probcl.core.layout import RunPaths
from probcl.errors import RunError
from probcl.tasks.evaluate import evaluate_run
from probcl.tasks.pretrain import pretrain


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _no_temporaries(folder) -> bool:
    return not [p for p in folder.rglob("*.tmp")]


def _disk_full_writing(name: str, monkeypatch) -> None:
    """ENOSPC at the fsync of every atomic write of a file called ``name`` (its temporary file is written,
    then the disk is full); other files are written normally."""
    real_mkstemp, real_fsync = tempfile.mkstemp, os.fsync
    temporaries: dict[int, str] = {}

    def mkstemp(*args, **kwargs):
        fd, path = real_mkstemp(*args, **kwargs)
        temporaries[fd] = os.path.basename(path)
        return fd, path

    def fsync(fd):
        if temporaries.get(fd, "").startswith(f".{name}."):
            _disk_full()
        return real_fsync(fd)

    monkeypatch.setattr("probcl.core.io.tempfile.mkstemp", mkstemp)
    monkeypatch.setattr("probcl.core.io.os.fsync", fsync)


def test_failed_checkpoint_write_keeps_last_and_resumes(tiny_config, monkeypatch):
    cfg = tiny_config(run_name="full-disk")
    paths = RunPaths(cfg.run_dir)
    pretrain(cfg)
    before = paths.last.read_bytes()
    _disk_full_writing("last.ckpt", monkeypatch)
    with pytest.raises(RunError, match="No space left on device.*previous last.ckpt.*intact"):
        pretrain(tiny_config(run_name="full-disk", **{"train.epochs": 2}))
    assert paths.last.read_bytes() == before and _no_temporaries(paths.root)
    with pytest.raises(RunError, match=r"\(pretraining resumes from its last checkpoint\)$"):
        pretrain(tiny_config(run_name="full-disk", **{"train.epochs": 2}))
    monkeypatch.undo()
    pretrain(tiny_config(run_name="full-disk", **{"train.epochs": 2}))
    assert torch.load(paths.last, weights_only=False)["global_step"] == 8


def test_failed_metrics_append_leaves_no_torn_row(tiny_config, monkeypatch):
    cfg = tiny_config(run_name="metrics")
    paths = RunPaths(cfg.run_dir)
    pretrain(cfg)
    before = paths.metrics.read_bytes()
    real_write = os.write

    def half_then_full(fd, data):  # half the row reaches the disk, then ENOSPC
        real_write(fd, data[: len(data) // 2])
        _disk_full()

    monkeypatch.setattr("probcl.runs.metrics_log.os.write", half_then_full)
    with pytest.raises(RunError, match="cannot write .*metrics.jsonl"):
        pretrain(tiny_config(run_name="metrics", **{"train.epochs": 2}))
    assert paths.metrics.read_bytes() == before
    assert all(json.loads(line) for line in before.decode().splitlines())


def test_failed_eval_json_write_keeps_previous_results(tiny_config, monkeypatch):
    run = pretrain(tiny_config(run_name="eval"))
    evaluate_run(run, ["knn"])
    before = RunPaths(run).eval.read_bytes()
    monkeypatch.setattr("probcl.core.io.os.fsync", _disk_full)
    with pytest.raises(RunError, match="eval.json"):
        evaluate_run(run, ["linear"])
    assert RunPaths(run).eval.read_bytes() == before and _no_temporaries(run)
    assert not (run / ".lock").exists()  # the failed command released the run directory


def test_a_failed_write_outside_pretraining_does_not_promise_a_resume(tmp_path):
    """An export (or any other write) to a path that cannot be written names the fix, not pretraining's resume."""
    from probcl.core.io import atomic_write_text

    (tmp_path / "a-file").write_text("")
    with pytest.raises(RunError, match="cannot write .*a-file/export/config.json") as error:
        atomic_write_text(tmp_path / "a-file" / "export" / "config.json", "{}")
    assert "a-file is a file, not a folder" in str(error.value)
    assert str(error.value).endswith("choose another path and run the command again")


def test_a_row_torn_by_a_kill_is_dropped_on_resume_and_the_next_rows_start_on_their_own_line(tiny_config):
    """A kill mid-append leaves a torn last line; readers skip it. The resumed run must not append its first row
    onto that line (the two would make one unreadable line, losing a good row too)."""
    paths = RunPaths(pretrain(tiny_config(run_name="torn", **{"train.epochs": 1})).resolve())
    whole = paths.metrics.read_bytes()
    paths.metrics.write_bytes(whole[:-25])  # the last row cut short, no newline
    pretrain(tiny_config(run_name="torn", **{"train.epochs": 2}))
    lines = paths.metrics.read_text().splitlines()
    rows = [json.loads(line) for line in lines]  # every line is whole JSON
    steps = [row["step"] for row in rows if "loss" in row or "train/loss" in row]
    assert whole.decode().splitlines()[:-1] == lines[: len(whole.decode().splitlines()) - 1]
    assert max(steps) == 7 and len(rows) > len(whole.decode().splitlines())
