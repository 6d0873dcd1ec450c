"""A normal pretrain (fresh, then resumed), evaluate and score print no warning a user cannot act on.

Each of these printed one before: Lightning's "Checkpoint directory ... exists and is not empty" on every resume,
its "number of training batches is smaller than the logging interval" for short epochs (every benchmark-tiny
cell), its "Found N module(s) in eval mode" for tau-posthoc's frozen backbone, and torch.export's "No complete
tensor found" when `probcl score` saved its scoring network.
"""

from __future__ import annotations

import warnings

from conftest import tiny_overrides

from probcl.cli import main

# Python shows none of these categories to a user by default (only code run as __main__ shows its own
# DeprecationWarnings), so a user of the CLI never sees them: the check leaves them out.
HIDDEN_BY_PYTHON = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


def cli(*args: object) -> None:
    assert main([str(a) for a in args]) == 0


def flags(**overrides: object) -> list[object]:
    return [token for key, value in overrides.items() for token in (f"--{key}", value)]


def test_pretrain_resume_evaluate_and_score_warn_about_nothing(tmp_path):
    run = tmp_path / "run"
    short = {"train.limit_train_batches": 3}  # 3 batches an epoch: below Lightning's default logging interval
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli("pretrain", *flags(**tiny_overrides(run, **short)))
        cli("pretrain", *flags(**tiny_overrides(run, **short)), "--train.epochs", 2)  # resumes from last.ckpt
        posthoc = tiny_overrides(tmp_path / "posthoc", method="tau-posthoc", init=run, **short)  # frozen backbone
        cli("pretrain", *flags(**posthoc))
        cli("evaluate", run, "--suite", "linear,knn,ood", "--max-train", 300, "--option", "ood.datasets=noise:gaussian")
        cli("score", run, "--dataset", "digits", "--split", "test", "--max-train", 300, "--out", tmp_path / "s.csv")
    shown = [f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in caught]
    assert [s for s, w in zip(shown, caught) if not issubclass(w.category, HIDDEN_BY_PYTHON)] == []


def test_pretrain_prints_none_of_lightnings_per_run_device_and_loader_lines(tmp_path, capfd):
    """The start-up summary names the device and precision: Lightning's "GPU available / TPU available" and its
    "Loading `train_dataloader` to estimate number of stepping batches" lines said nothing more, on every run."""
    cli("pretrain", *flags(**tiny_overrides(tmp_path / "run")))
    out, err = capfd.readouterr()
    said = (out + err).splitlines()
    assert "  device     cpu" in said and "`Trainer.fit` stopped: `max_epochs=1` reached." in said  # others stay
    assert not [m for m in said if m.startswith(("GPU available", "TPU available", "Loading `train_dat"))]


def test_the_progress_bar_counts_epochs_from_one():
    from types import SimpleNamespace

    from probcl.runs.progress_bar import LoggedStepProgressBar

    bar = LoggedStepProgressBar()
    bar._trainer = SimpleNamespace(max_epochs=2)  # the trainer Lightning attaches at setup
    assert [bar._get_train_description(epoch).strip() for epoch in (0, 1)] == ["epoch 1 of 2", "epoch 2 of 2"]
