"""(Not a sub-command: the leading underscore keeps it out of the CLI's discovery.)

A task's options dataclass from a command's parsed flags, checked by :func:`probcl.config.from_dict`: the
dataclass owns the defaults and the bounds, the command only names its flags.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from probcl.config import INFERENCE_BATCH_SIZE, from_dict
from probcl.core.deprecation import RenamedFlag


def positive_int(text: str) -> int:
    """argparse type of a count or size that must be at least 1 (an image size, a channel count)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def options_from_flags(
    cls: type, args: argparse.Namespace, flags: Mapping[str, str] | None = None, **values: Any
) -> Any:
    """Dataclass ``cls`` from the flags whose argparse ``dest`` is one of its fields (a flag left unset, ``None``,
    keeps the field's default) and ``values``; a bad value is one ConfigError naming the flag: ``--field-name``,
    or ``flags[field]`` where the flag is spelled otherwise (``{"reference_size": "--reference"}``)."""
    given = vars(args)
    data = {f.name: given[f.name] for f in dataclasses.fields(cls) if given.get(f.name) is not None}
    data.update(values)
    return from_dict(cls, data, names=flag_names(data, flags))


def flag_names(fields: Iterable[str], flags: Mapping[str, str] | None = None) -> dict[str, str]:
    """The flag that sets each option field, for error messages: ``--field-name``, or ``flags[field]`` where the
    command spells it otherwise."""
    return {name: (flags or {}).get(name, "--" + name.replace("_", "-")) for name in fields}


def add_inference_flags(p: argparse.ArgumentParser) -> None:
    """The flags of a command that runs a trained model over a dataset: ``--inference-batch-size`` (and its retired
    spelling ``--batch-size``), ``--num-workers`` and ``--device``. Each is unset (``None``) unless given, so that the
    task's options dataclass keeps its default (:func:`options_from_flags`)."""
    p.add_argument(
        "--inference-batch-size",
        dest="batch_size",
        type=int,
        help=f"images per forward pass (default: {INFERENCE_BATCH_SIZE})",
    )
    p.add_argument(
        "--batch-size",
        dest="batch_size",
        type=int,
        action=RenamedFlag,
        new="--inference-batch-size",
        help=argparse.SUPPRESS,
    )
    p.add_argument("--num-workers", type=int, help="image-decoding processes for folder datasets (default: 0)")
    p.add_argument("--device", help="auto (CUDA when present), cpu, cuda, cuda:1, ... (default: auto)")
