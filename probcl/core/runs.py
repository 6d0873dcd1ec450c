"""Run directories: their layout, loading a trained model back, and the device choice."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
import torch

from probcl.errors import RunError


@dataclass(frozen=True)
class RunPaths:
    """Where everything of one pretraining run lives."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def last(self) -> Path:
        return self.checkpoints / "last.ckpt"

    @property
    def best(self) -> Path:
        return self.checkpoints / "best.ckpt"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def eval(self) -> Path:
        return self.root / "eval.json"

    @property
    def report(self) -> Path:
        return self.root / "report.md"

    @property
    def plots(self) -> Path:
        return self.root / "plots"


def resolve_device(name: str | None = "auto") -> torch.device:
    """``auto`` -> CUDA when present, else CPU; any other name is passed to torch.device."""
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def find_checkpoint(run: str | Path, which: str = "last") -> Path:
    """The checkpoint file of a run directory (``last`` or ``best``), or ``run`` itself if it is a file."""
    run = Path(run)
    if run.is_file():
        return run
    if not run.is_dir():
        raise RunError(f"run directory {run} does not exist; pass the --run-dir of a `probcl pretrain` run")
    paths = RunPaths(run)
    ckpt = paths.best if which == "best" else paths.last
    if which == "best" and not ckpt.exists():
        ckpt = paths.last
    if not ckpt.exists():
        raise RunError(f"{run} has no checkpoint ({ckpt} missing); has `probcl pretrain` finished an epoch there?")
    return ckpt


def load(run: str | Path, checkpoint: str = "last", device: str | None = "auto"):
    """Load the trained model of a run directory (or a .ckpt file), in eval mode.

    Returns the method's LightningModule: ``embed(images)`` gives backbone features,
    ``project(images)`` projection-head outputs and, where the method defines one,
    ``uncertainty(images)`` a per-image score (higher = more uncertain).
    """
    from probcl.methods import METHODS

    ckpt_path = find_checkpoint(run, checkpoint)
    try:
        meta = torch.load(ckpt_path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the same thing here
        raise RunError(f"cannot read checkpoint {ckpt_path}: {e}") from None
    hparams = meta.get("hyper_parameters", {})
    if "config" not in hparams:
        raise RunError(f"{ckpt_path} is not a probcl checkpoint (no config in its hyper-parameters)")
    cls = METHODS.get(hparams["config"]["method"])
    model = cls(**hparams)
    model.load_state_dict(meta["state_dict"])
    model.checkpoint_meta = {"path": str(ckpt_path), "epoch": meta.get("epoch"), "global_step": meta.get("global_step")}
    return model.to(resolve_device(device)).eval()


def read_metrics(run: str | Path) -> list[dict]:
    """All rows of a run's metrics.jsonl (empty list when absent)."""
    from probcl.core.metrics_log import read_rows

    return read_rows(RunPaths(Path(run)).metrics)


def epoch_curve(run: str | Path, key: str = "monitor/knn_top1") -> list[tuple[int, float]]:
    """(epoch, value) pairs of a per-epoch metric; the last value wins when an epoch was logged twice."""
    curve: dict[int, float] = {}
    for row in read_metrics(run):
        if key in row and "epoch" in row:
            curve[int(row["epoch"])] = float(row[key])
    return sorted(curve.items())

