"""(Not a sub-command: the leading underscore keeps it out of the CLI's discovery.)

A task's options dataclass from a command's parsed flags, checked by :func:`probcl.config.from_dict`: the
dataclass owns the defaults and the bounds, the command only names its flags.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from typing import Any

from probcl.config import from_dict


def options_from_flags(
    cls: type, args: argparse.Namespace, flags: Mapping[str, str] | None = None, **values: Any
) -> Any:
    """Dataclass ``cls`` from the flags whose argparse ``dest`` is one of its fields (a flag left unset, ``None``,
    keeps the field's default) and ``values``; a bad value is one ConfigError naming the flag: ``--field-name``,
    or ``flags[field]`` where the flag is spelled otherwise (``{"reference_size": "--reference"}``)."""
    given = vars(args)
    data = {f.name: given[f.name] for f in dataclasses.fields(cls) if given.get(f.name) is not None}
    data.update(values)
    names = {name: (flags or {}).get(name, "--" + name.replace("_", "-")) for name in data}
    return from_dict(cls, data, names=names)
