"""Run directories: their layout, loading a trained model back, and the device choice."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from probcl.errors import ConfigError, RunError

if TYPE_CHECKING:
    from probcl.eval.encoder import ForeignEncoder
    from probcl.methods.base import SSLMethod


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
    """``auto`` -> CUDA when present, else CPU; any other name is passed to torch.device. A name torch does
    not know, or a CUDA device this machine lacks, is a ConfigError naming the choices."""
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(str(name))
    except RuntimeError:
        raise ConfigError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"device {name!r} needs a CUDA GPU and this machine has none; use --device cpu or auto")
        if device.index is not None and device.index >= count:
            raise ConfigError(f"device {name!r}: this machine has {count} CUDA GPU(s), cuda:0..cuda:{count - 1}")
    return device


def find_checkpoint(run: str | Path, which: str = "last") -> Path:
    """The checkpoint file of a run directory (``last`` or ``best``), or ``run`` itself if it is a file."""
    from probcl.models.pretrained import exported_weights

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
    if which == "best" and not ckpt.exists():
        ckpt = paths.last
    if not ckpt.exists():
        raise RunError(f"{run} has no checkpoint ({ckpt} missing); has `probcl pretrain` finished an epoch there?")
    return ckpt


def load(path: str | Path, checkpoint: str = "last", device: str | None = "auto") -> SSLMethod | ForeignEncoder:
    """A trained model for inference, in eval mode on ``device`` (``auto``: CUDA when present).

    ``path`` is a run directory or ``.ckpt`` file: the method, with ``embed(images)`` (backbone
    features), ``project(images)`` (projection-head output) and, where the method has one,
    ``uncertainty(images)`` (higher = more uncertain); or a `probcl export` folder, its ``config.json``
    or its ``model.safetensors``: the backbone with its recorded preprocessing, with ``embed(images)``.
    ``images``: uint8 or [0, 1] float tensors, PIL images, image files, or lists of them; every call
    runs without autograd, ``batch_size`` images at a time (:mod:`probcl.models.inference`).
    """
    from probcl.models.pretrained import exported_weights

    path = Path(path)
    if not path.exists():
        raise RunError(
            f"{path} does not exist; probcl.load takes a run directory, a .ckpt file, or a "
            f"`probcl export` folder (or its config.json / model.safetensors)"
        )
    if path.suffix == ".onnx":
        raise RunError(
            f"{path} is an ONNX graph: run it with onnxruntime; probcl.load takes the export folder "
            f"around it ({path.parent})"
        )
    weights = exported_weights(path)
    return load_run(path, checkpoint, device) if weights is None else load_export(weights, device)


def load_export(weights: Path, device: str | None = "auto") -> ForeignEncoder:
    """The backbone of a `probcl export` weights file with the preprocessing its config.json records."""
    from probcl.eval.encoder import ForeignEncoder
    from probcl.methods.base import DataInfo
    from probcl.models.pretrained import EXPORT_CONFIG, describe_pretrained, pretrained_backbone

    source = describe_pretrained(str(weights), "load")
    if source.mean is None or source.std is None or source.image_size is None:
        raise RunError(
            f"{weights}: no {EXPORT_CONFIG} with the input it takes (in_channels, image_size, "
            f"normalization) next to it; keep the {EXPORT_CONFIG} that `probcl export` writes, or "
            f"export the run again"
        )
    backbone = pretrained_backbone(source)
    recorded = source.recorded
    info = DataInfo(
        str(recorded.get("dataset", "unknown")),
        int(source.channels or 0),
        int(source.image_size),
        recorded.get("num_classes"),
        list(source.mean),
        list(source.std),
    )
    encoder = ForeignEncoder(
        backbone,
        info,
        str(recorded.get("method", weights.stem)),
        {"weights": str(weights), "backbone": (source.model or {}).get("backbone")},
    )
    return encoder.to(resolve_device(device)).eval()


def load_run(run: str | Path, checkpoint: str = "last", device: str | None = "auto") -> SSLMethod:
    """The trained method of a run directory (or a .ckpt file), in eval mode on ``device``."""
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
    # init named where training started; the checkpoint already holds those weights (trained further)
    try:
        model = cls(**{**hparams, "config": {**hparams["config"], "init": None}})
    except ConfigError as e:
        raise RunError(
            f"{ckpt_path} was written by an incompatible probcl version or config ({e}); "
            f"retrain it with this version, or load it with the version that wrote it"
        ) from None
    own, saved = set(model.state_dict()), set(meta["state_dict"])
    try:
        if own != saved:
            raise RuntimeError(
                f"{len(own - saved)} missing keys (e.g. {', '.join(sorted(own - saved)[:3])}), "
                f"{len(saved - own)} unexpected"
            )
        model.load_state_dict(meta["state_dict"])
    except RuntimeError as e:
        raise RunError(
            f"{ckpt_path}: its weights do not match method {hparams['config']['method']!r} "
            f"({str(e).splitlines()[0]}); the checkpoint is damaged or from an incompatible probcl "
            f"version"
        ) from None
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


def move_aside(paths: RunPaths) -> Path | None:
    """Move a previous run's outputs into ``RUN/previous-<timestamp>/``; returns that folder (None if nothing)."""
    outputs = [
        p
        for p in (
            paths.config,
            paths.checkpoints,
            paths.metrics,
            paths.metrics.with_suffix(".csv"),
            paths.eval,
            paths.report,
            paths.report.with_suffix(".html"),
            paths.plots,
            paths.root / "tensorboard",
            paths.root / "mlruns",
        )
        if p.exists()
    ]
    if not outputs:
        return None
    target = paths.root / f"previous-{time.strftime('%Y%m%d-%H%M%S')}"
    suffix = 1
    while target.exists():
        suffix += 1
        target = target.with_name(f"{target.name.split('.')[0]}.{suffix}")
    target.mkdir()
    for path in outputs:
        os.replace(path, target / path.name)
    return target


class RunLock:
    """One writer per run directory: ``RUN/.lock`` holds the owner's pid and host while a command writes.

    A second writer fails at once with :class:`RunError`; a lock left by a dead process on this
    host is taken over (and said so on stderr). Use as a context manager.
    """

    def __init__(self, root: str | Path, command: str) -> None:
        self.root, self.command = Path(root), command
        self.path = self.root / ".lock"
        self.held = False
        self.created_root = False

    def __enter__(self) -> RunLock:
        check_run_dir(self.root)
        self.created_root = not self.root.exists()
        self.root.mkdir(parents=True, exist_ok=True)
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "command": self.command}
        while True:
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._take_over_if_stale()
                continue
            except OSError as e:
                raise RunError(
                    f"cannot write in run directory {self.root} ({e.strerror}); "
                    f"make it writable or choose another --run-dir"
                ) from None
            with os.fdopen(fd, "w") as fh:
                json.dump(owner, fh)
            self.held = True
            return self

    def _take_over_if_stale(self) -> None:
        try:
            owner = json.loads(self.path.read_text())
            pid, host = int(owner["pid"]), str(owner["host"])
        except (OSError, ValueError, KeyError, TypeError):
            owner, pid, host = {}, -1, socket.gethostname()  # torn by a kill while it was written: stale
        if host != socket.gethostname() or _alive(pid):
            raise RunError(
                f"{self.root} is in use by `probcl {owner.get('command', '?')}` (pid {pid} on {host}); wait for "
                f"it to finish or choose another --run-dir. If that process is gone, delete {self.path}."
            )
        print(f"probcl: taking over {self.path}: its owner (pid {pid}) is no longer running", file=sys.stderr)
        self.path.unlink(missing_ok=True)

    def __exit__(self, *exc: object) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False
        if self.created_root:  # a command that failed before writing anything leaves no empty run dir
            try:
                self.root.rmdir()
            except OSError:
                pass  # not empty: the run wrote files


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def check_run_dir(root: Path) -> None:
    """Raise RunError when ``root`` exists but is not a directory."""
    if root.exists() and not root.is_dir():
        raise RunError(f"--run-dir {root} is an existing file, not a directory; choose another path")
