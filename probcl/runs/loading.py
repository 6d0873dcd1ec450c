"""Loading what probcl wrote back into a model: a run (its trained method) or an export (its encoder)."""

from __future__ import annotations

from pathlib import Path

from probcl.core.layout import EXPORT_CONFIG, exported_weights
from probcl.data.info import DataInfo
from probcl.errors import ConfigError, RunError
from probcl.methods import METHODS
from probcl.methods.base import SSLMethod
from probcl.models.checkpoint import RunCheckpoint, read_checkpoint
from probcl.models.encoder import ForeignEncoder
from probcl.models.pretrained import describe_pretrained, pretrained_backbone
from probcl.runtime.devices import resolve_device


def load(path: str | Path, checkpoint: str = "last", device: str | None = "auto") -> SSLMethod | ForeignEncoder:
    """A trained model for inference, in eval mode on ``device`` (``auto``: CUDA when present).

    ``path`` is a run directory or ``.ckpt`` file: the method, with ``embed(images)`` (backbone
    features), ``project(images)`` (projection-head output) and, where the method has one,
    ``uncertainty(images)`` (higher = more uncertain); or a `probcl export` folder, its ``config.json``
    or its ``model.safetensors``: the backbone with its recorded preprocessing, with ``embed(images)``.
    ``images``: uint8 or [0, 1] float tensors or NumPy arrays, PIL images, image files, or lists of them; every call
    runs without autograd, ``batch_size`` images at a time (:mod:`probcl.models.inference`).
    """
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
        recorded.get("class_names"),
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
    return method_of(read_checkpoint(run, checkpoint), device)


def method_of(checkpoint: RunCheckpoint, device: str | None = "auto") -> SSLMethod:
    """The method a checkpoint read by :func:`~probcl.models.checkpoint.read_checkpoint` trained, with its weights,
    in eval mode on ``device``."""
    hparams = checkpoint.hyper_parameters
    cls = METHODS.get(checkpoint.config.method)
    # init named where training started; the checkpoint already holds those weights (trained further)
    try:
        model = cls(**{**hparams, "config": {**hparams["config"], "init": None}})
    except ConfigError as e:
        raise checkpoint.incompatible(e) from None
    own, saved = set(model.state_dict()), set(checkpoint.state_dict)
    try:
        if own != saved:
            raise RuntimeError(
                f"{len(own - saved)} missing keys (e.g. {', '.join(sorted(own - saved)[:3])}), "
                f"{len(saved - own)} unexpected"
            )
        model.load_state_dict(checkpoint.state_dict)
    except RuntimeError as e:
        raise RunError(
            f"{checkpoint.path}: its weights do not match method {checkpoint.config.method!r} "
            f"({str(e).splitlines()[0]}); the checkpoint is damaged or from an incompatible probcl "
            f"version"
        ) from None
    model.checkpoint_meta = dict(checkpoint.meta)
    return model.to(resolve_device(device)).eval()
