"""`probcl export`: a run's backbone in the layout timm and Hugging Face tools use, runnable outside probcl.

The output folder (default ``RUN/export/``) holds

- ``model.safetensors``: the backbone's state_dict (``model.pt``, a ``torch.save`` of it, with ``--format
  pt``). ResNet backbones keep torchvision's parameter names (``fc`` is dropped), so the file loads into
  ``torchvision.models.resnet18()`` with ``strict=False`` once ``conv1`` and ``maxpool`` match the run's stem;
- ``config.json``: what the weights need: method, backbone fields, input channels and size, feature width,
  normalisation mean/std, probcl version, the checkpoint they came from;
- with ``--format onnx``, also ``model.onnx``: input ``images``, float in [0, 1], (N, C, H, W) with any N;
  the normalisation is inside the graph; output ``features`` (N, feature_dim).

``probcl.load(FOLDER)`` reads the folder back (:func:`probcl.runs.loading.load`). ``--out FILE.safetensors``
(or ``.pt`` / ``.onnx``) writes that one file and its config as ``FILE.json`` beside it instead.
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

import probcl
from probcl.config import to_plain
from probcl.core.io import atomic_write, atomic_write_json, output_path_problem, refuse_foreign_side_file
from probcl.core.layout import EXPORT_CONFIG, EXPORT_FORMAT, EXPORT_WEIGHTS, RunPaths
from probcl.data.augment import Normalizer
from probcl.errors import ConfigError, RunError
from probcl.methods.base import SSLMethod
from probcl.models.pretrained import BACKBONE_FIELDS
from probcl.runs.loading import load_run
from probcl.runtime.torch_files import atomic_torch_save

FORMATS = ("safetensors", "onnx", "pt")
ONNX_FILE = "model.onnx"
ONNX_INPUT, ONNX_OUTPUT = "images", "features"
ONNX_OPSET = 17  # run by every maintained ONNX runtime
WEIGHTS_FILE = {"safetensors": "model.safetensors", "onnx": "model.safetensors", "pt": "model.pt"}
FILE_SUFFIXES = {"safetensors": (".safetensors",), "onnx": (".onnx",), "pt": (".pt", ".pth", ".bin")}


class NormalizedBackbone(nn.Module):
    """[0, 1] float images -> backbone features: the input normalisation and the backbone as one graph."""

    def __init__(self, backbone: nn.Module, normalizer: Normalizer) -> None:
        super().__init__()
        self.backbone, self.normalizer = backbone, normalizer

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.backbone(self.normalizer(images))


def export_backbone(run: str | Path, out: str | Path | None = None, fmt: str = "safetensors") -> Path:
    """Export the backbone of ``run`` (a run directory or .ckpt; see the module doc) as ``fmt``; returns the
    file of that format (``model.safetensors``, ``model.pt`` or ``model.onnx``; or ``out`` when it names a file)."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; valid: {', '.join(FORMATS)}")
    if fmt == "onnx":
        _require_onnx()
    target = _target(Path(run), out, fmt)
    return export_model(load_run(run, device="cpu"), target, fmt)


def export_model(model: SSLMethod, target: Path, fmt: str) -> Path:
    """Write ``model``'s backbone as ``fmt`` into the folder ``target`` (or the one file it names, with its
    FILE.json); returns the file of that format. Every file is written before the config.json that names it,
    each atomically, and an earlier export's other files are removed after it: at every moment config.json
    names only files that exist, and a failed export (one RunError) leaves the folder as it was."""
    state = {k: v.detach().contiguous().clone() for k, v in model.backbone.state_dict().items()}
    if names_one_file(target):  # one file and its FILE.json
        if fmt == "onnx":
            _write_onnx(model, target)
        else:
            _write_weights(state, target, fmt)
        atomic_write_json(
            config_file(target), export_config(model, {"onnx" if fmt == "onnx" else "weights": target.name})
        )
        return target
    weights = target / WEIGHTS_FILE[fmt]
    files = {"weights": weights.name, **({"onnx": ONNX_FILE} if fmt == "onnx" else {})}
    if fmt == "onnx":  # first: the one step that can fail on a sound model
        _write_onnx(model, target / ONNX_FILE)
    _write_weights(state, weights, fmt)
    atomic_write_json(target / EXPORT_CONFIG, export_config(model, files))
    for stale in (*EXPORT_WEIGHTS, ONNX_FILE):  # an earlier export's other files would not match these weights
        if stale not in files.values():
            (target / stale).unlink(missing_ok=True)
    return target / files["onnx" if fmt == "onnx" else "weights"]


def names_one_file(out: Path) -> bool:
    """``out`` names one exported file (a known suffix, not a folder there); otherwise an export folder."""
    return out.suffix in {s for options in FILE_SUFFIXES.values() for s in options} and not out.is_dir()


def config_file(path: Path) -> Path:
    """The config.json that describes an exported file: its folder's, or ``FILE.json`` for a single file."""
    return path.parent / EXPORT_CONFIG if path.name in (*EXPORT_WEIGHTS, ONNX_FILE) else path.with_suffix(".json")


def export_config(model: SSLMethod, files: dict[str, str]) -> dict[str, Any]:
    """config.json: what a user (or ``probcl.load``) needs to run the exported backbone."""
    info = model.data_info
    return {
        "format": EXPORT_FORMAT,
        "probcl_version": probcl.__version__,
        "method": model.cfg.method,
        "model": {k: v for k, v in to_plain(model.cfg.model).items() if k in BACKBONE_FIELDS},
        "in_channels": info.channels,
        "image_size": info.image_size,
        "feature_dim": model.feature_dim,
        "normalization": {"mean": info.mean, "std": info.std},
        "input": "images (N, in_channels, image_size, image_size) in [0, 1] (uint8 / 255), then (x - mean) / std; "
        f"{ONNX_FILE} takes the [0, 1] images and normalises them itself",
        "dataset": info.dataset,
        "num_classes": info.num_classes,
        "class_names": info.class_names,
        "files": files,
        "source": model.checkpoint_meta,
    }


def _target(run: Path, out: str | Path | None, fmt: str) -> Path:
    """The export folder, or the single file ``out`` names (by its suffix)."""
    if out is None:  # RUN/export, also for RUN/checkpoints/NAME.ckpt
        root = run if run.is_dir() else run.parent
        return (root.parent if RunPaths(root.parent).checkpoints == root else root) / "export"
    out = Path(out)
    problem = output_path_problem(out / EXPORT_CONFIG if out.is_dir() else out)
    if problem is not None:
        raise ConfigError(f"--out {out}: {problem}; choose another path")
    if names_one_file(out):
        if out.suffix not in FILE_SUFFIXES[fmt]:
            raise ConfigError(
                f"--out {out} does not fit --format {fmt}: name a folder, or a {' / '.join(FILE_SUFFIXES[fmt])} file"
            )
        refuse_foreign_side_file(
            out, config_file(out), "config", "a probcl export's config", lambda c: c.get("format") == EXPORT_FORMAT
        )
        return out
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is an existing file; name a folder, or a {' / '.join(FILE_SUFFIXES[fmt])} file")
    return out


def _write_weights(state: dict[str, torch.Tensor], path: Path, fmt: str) -> None:
    if fmt == "pt":
        atomic_torch_save(path, state)
        return
    from safetensors.torch import save

    payload = save(state, metadata={"format": "pt"})
    atomic_write(path, lambda fh: fh.write(payload))


def _require_onnx() -> None:
    try:
        import onnx  # noqa: F401 - checks the model after export
    except ImportError:
        raise ConfigError("--format onnx needs the onnx package: pip install 'probcl[onnx]'") from None


def _write_onnx(model: SSLMethod, path: Path) -> None:
    """The normalisation and backbone as an ONNX graph with a dynamic batch axis, checked by onnx. A failure is
    one RunError: what the exporter prints on the way (its whole TorchScript graph) is captured and dropped."""
    import onnx

    info = model.data_info
    graph = NormalizedBackbone(model.backbone, model.normalizer).eval()
    example = torch.rand(2, info.channels, info.image_size, info.image_size)
    with tempfile.TemporaryDirectory() as scratch:
        written = Path(scratch) / ONNX_FILE
        try:
            with _captured_output(Path(scratch) / "exporter.log"), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notes
                torch.onnx.export(
                    graph,
                    (example,),
                    written,
                    dynamo=False,
                    opset_version=ONNX_OPSET,
                    input_names=[ONNX_INPUT],
                    output_names=[ONNX_OUTPUT],
                    dynamic_axes={ONNX_INPUT: {0: "batch"}, ONNX_OUTPUT: {0: "batch"}},
                )
            onnx.checker.check_model(str(written))
        except Exception as e:  # noqa: BLE001 - any exporter failure means the same thing here
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise RunError(
                f"cannot export the {model.cfg.model.backbone} backbone to ONNX ({first}); "
                f"--format safetensors or pt still export it"
            ) from None
        graph_bytes = written.read_bytes()
    atomic_write(path, lambda fh: fh.write(graph_bytes))


@contextmanager
def _captured_output(log: Path) -> Iterator[None]:
    """Standard output and error, at the file-descriptor level (C++ writes there too), into ``log``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    try:
        with log.open("wb") as sink:
            for fd in saved:
                os.dup2(sink.fileno(), fd)
            yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
