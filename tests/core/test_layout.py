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


def test_an_eval_json_of_the_wrong_shape_is_one_error_naming_the_file_and_the_fix(tmp_path):
    """Valid JSON that is not one object per suite (edited by hand, or another program's file) is refused in one
    RunError, not an AttributeError later; an absent file is no results, a real one is read as it is."""
    import pytest

    from probcl.core.layout import read_evaluations
    from probcl.errors import RunError

    path = tmp_path / "eval.json"
    assert read_evaluations(path) == {}
    for text in ("[]", "null", '"x"', '{"knn": 5}', '{"linear": {"protocol": 3}}'):
        path.write_text(text)
        with pytest.raises(RunError, match="is not a probcl evaluation file .* delete it and run the command again"):
            read_evaluations(path)
    path.write_text('{"knn": {"top1": 80.0, "protocol": {"k": 200}}}')
    assert read_evaluations(path) == {"knn": {"top1": 80.0, "protocol": {"k": 200}}}
