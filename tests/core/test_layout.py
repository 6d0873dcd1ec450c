"""Finding a run's checkpoint."""

from __future__ import annotations

from probcl.core.layout import RunPaths, find_checkpoint


def test_best_of_a_run_without_one_is_its_last_and_says_so(tmp_path, capsys):
    """Only a run with the online kNN monitor has best.ckpt: asking another run for it gives its last.ckpt, with a
    line on stderr (not silently); asking for last says nothing."""
    paths = RunPaths(tmp_path / "run")
    paths.checkpoints.mkdir(parents=True)
    paths.last.write_bytes(b"")
    assert find_checkpoint(paths.root, "last") == paths.last and capsys.readouterr().err == ""
    assert find_checkpoint(paths.root, "best") == paths.last
    assert "has no best.ckpt" in capsys.readouterr().err
    paths.best.write_bytes(b"")
    assert find_checkpoint(paths.root, "best") == paths.best and capsys.readouterr().err == ""
