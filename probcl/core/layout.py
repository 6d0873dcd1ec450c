"""Where probcl's files live: a run directory (:class:`RunPaths`), a `probcl export` folder, weights files.

Torch-free: these are facts about paths, used by every layer that reads or writes runs and exports.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from probcl.core.io import read_json
from probcl.errors import ConfigError, RunError

RUN_SUFFIXES = (".ckpt",)
WEIGHT_SUFFIXES = (".safetensors", ".pt", ".pth", ".bin")
EXPORT_CONFIG = "config.json"  # a `probcl export` folder (timm / Hugging Face layout): this and the weights
EXPORT_WEIGHTS = ("model.safetensors", "model.pt")  # the weights file of an export folder, by --format
EXPORT_FORMAT = "probcl-backbone"  # config.json's "format": marks a probcl export's config


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

    @property
    def unreadable(self) -> Path:
        """The image files of the run's data that the last command on it skipped, one ``path<TAB>reason`` a line."""
        return self.root / "unreadable.txt"


def exported_weights(path: Path) -> Path | None:
    """The weights file ``path`` names: a `probcl export` folder's (the folder or its ``config.json``), or
    ``path`` itself when it is a weights file; None for anything else (a run directory, a .ckpt file)."""
    if path.is_file() and path.suffix in WEIGHT_SUFFIXES:
        return path
    if path.is_file() and path.name == EXPORT_CONFIG:
        folder = path.parent
    elif (
        path.is_dir()
        and not (RunPaths(path).config.exists() or RunPaths(path).checkpoints.exists())
        and any((path / name).is_file() for name in (EXPORT_CONFIG, *EXPORT_WEIGHTS))
    ):
        folder = path
    else:
        return None
    for name in EXPORT_WEIGHTS:
        if (folder / name).is_file():
            return folder / name
    raise ConfigError(
        f"{folder} has {EXPORT_CONFIG} but no weights ({' or '.join(EXPORT_WEIGHTS)}) next to it; "
        f"export the run again with `probcl export RUN --out {folder}`"
    )


def results_folder(run: str | Path) -> Path:
    """Where results about ``run`` are written (eval.json, plots, caches): a run directory itself; for a checkpoint
    file, the run directory whose ``checkpoints/`` holds it, else the folder the file is in."""
    run = Path(run)
    if run.is_dir():
        return run
    folder = run.parent
    return folder.parent if folder == RunPaths(folder.parent).checkpoints else folder


def find_checkpoint(run: str | Path, which: str = "last") -> Path:
    """The checkpoint file of a run directory (``last`` or ``best``; ``best`` of a run without one is its ``last``,
    said on stderr), or ``run`` itself if it is a file."""
    run = Path(run)
    weights = exported_weights(run) if run.exists() else None
    if weights is not None:
        raise RunError(
            f"{run} is an exported backbone, not a run: `probcl.load({str(run)!r})` gives its encoder "
            f"and `probcl evaluate --weights {weights}` evaluates it"
        )
    if run.is_file():
        return run
    if not run.is_dir():
        raise RunError(f"run directory {run} does not exist; pass the --run-dir of a `probcl pretrain` run")
    paths = RunPaths(run)
    ckpt = paths.best if which == "best" else paths.last
    if which == "best" and not ckpt.exists() and paths.last.exists():
        print(
            f"probcl: {run} has no best.ckpt (the online kNN monitor chooses one, and this run had none): "
            f"using last.ckpt",
            file=sys.stderr,
        )
        ckpt = paths.last
    if not ckpt.exists():
        raise RunError(f"{run} has no checkpoint ({ckpt} missing); has `probcl pretrain` finished an epoch there?")
    return ckpt


def read_evaluations(path: Path) -> dict[str, dict]:
    """The results an eval.json holds: one object per suite (``{}`` when there is none yet). Anything else, valid
    JSON or not, was written outside probcl: one RunError naming the file and the fix, not a traceback later."""
    results = read_json(path, {})
    if not isinstance(results, dict) or not all(
        isinstance(result, dict) and isinstance(result.get("protocol", {}), dict) for result in results.values()
    ):
        raise RunError(
            f"{path} is not a probcl evaluation file (it should hold one JSON object per suite); probcl writes it "
            f"atomically, so it was changed outside probcl: restore it from a copy, or delete it and run the "
            f"command again (its suites are redone)"
        )
    return results
