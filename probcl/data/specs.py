"""Dataset spec syntax (torch-free): the forms ``--dataset`` takes besides a registered name, and splits.

A spec is a registered name (``fashion-mnist``), a name with a class filter (``fashion-mnist:classes=0-7``), a
folder of image files (``folder:PATH[:stream=false]``) or an array file (``npz:PATH``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from probcl.errors import DatasetError

Split = Literal["train", "test", "all", "pretrain"]
SPLITS = ("train", "test", "all", "pretrain")

CLASS_FILTER = ":classes="  # `fashion-mnist:classes=0-7`: only these classes, relabelled 0..K-1 in the given order
STREAM_OPTION = ":stream="  # folder:PATH:stream=false holds the decoded folder in memory
PREFIXED = ("folder:", "npz:")
# dataset specs besides the registered names: paths, and a class filter on a registered name
SPEC_FORMS = ["folder:PATH[:stream=false]", "npz:PATH", f"NAME{CLASS_FILTER}0-7 (or 8,9)"]

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"}
HOLDOUT_FRACTION = 0.2  # test share of folder/npz datasets that have no explicit test split
HOLDOUT_SEED = 0


def unknown_dataset_message(spec: str, names: list[str]) -> str:
    """The error for a ``--dataset`` that is neither a registered name nor a spec form: the valid names and forms,
    and, when ``spec`` is a path on disk (``--dataset imgs`` for a folder), the prefix it lacks."""
    message = f"unknown dataset {spec!r}; valid choices: {', '.join(names)}, or {', '.join(SPEC_FORMS)}"
    path = Path(spec)
    if path.is_dir():
        return f"{message}. {spec} is a folder: pass --dataset folder:{spec}"
    if path.is_file() and path.suffix == ".npz":
        return f"{message}. {spec} is an array file: pass --dataset npz:{spec}"
    return message


def is_path_spec(spec: str) -> bool:
    """True for ``folder:`` and ``npz:`` specs (paths, not registered names)."""
    return spec.startswith(PREFIXED)


def parse_classes(text: str, spec: str) -> list[int]:
    """``0-7`` / ``8,9`` / ``0-3,7`` -> class indices, in order, without repeats."""
    classes: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            classes += [c for c in range(int(lo), int(hi or lo) + 1) if c not in classes]
    except ValueError:
        raise DatasetError(f"{spec}: classes must look like 0-7 or 8,9 (class indices), got {text!r}") from None
    if not classes:
        raise DatasetError(f"{spec}: no classes given; e.g. {spec.split(CLASS_FILTER)[0]}{CLASS_FILTER}0-7")
    return classes


def folder_spec(spec: str) -> tuple[Path, bool]:
    """``folder:PATH[:stream=true|false]`` -> (PATH, stream)."""
    body = spec[len("folder:") :]
    head, sep, value = body.rpartition(STREAM_OPTION)
    if not sep:
        return Path(body), True
    if value not in ("true", "false"):
        raise DatasetError(f"{spec}: stream must be true or false, got {value!r}")
    return Path(head), value == "true"
