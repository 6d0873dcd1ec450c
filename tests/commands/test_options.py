"""A task's options from a command's flags: the dataclass owns defaults and bounds, errors name the flag."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Annotated

import pytest

from probcl.commands._options import options_from_flags
from probcl.config import AtLeast, NonNegative
from probcl.errors import ConfigError


@dataclass
class Draw:
    num: Annotated[int, AtLeast(1)] = 64
    step_size: Annotated[float | None, NonNegative] = None
    reference_size: Annotated[int, AtLeast(1)] = 256
    tags: list[str] | None = None


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--num", type=int)
    p.add_argument("--step-size", type=float)
    p.add_argument("--reference", dest="reference_size", type=int)
    p.add_argument("--out")  # not a field: ignored
    return p.parse_args(list(argv))


def test_unset_flags_keep_the_dataclass_defaults():
    assert options_from_flags(Draw, parse()) == Draw(num=64, step_size=None, reference_size=256)


def test_given_flags_and_values_set_their_fields():
    options = options_from_flags(Draw, parse("--num", "3", "--step-size", "0.5", "--out", "x"), tags=["a"])
    assert options == Draw(num=3, step_size=0.5, reference_size=256, tags=["a"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--num", "0"], r"^--num must be >= 1, got 0$"),
        (["--step-size", "-1"], r"^--step-size must be >= 0, got -1\.0$"),
        (["--reference", "0"], r"^--reference must be >= 1, got 0$"),  # the flag, not the field
    ],
)
def test_a_bad_value_names_the_flag(argv, message):
    with pytest.raises(ConfigError, match=message):
        options_from_flags(Draw, parse(*argv), {"reference_size": "--reference"})
