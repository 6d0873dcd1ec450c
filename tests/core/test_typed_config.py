"""from_dict's field bounds: the names a string field accepts live in one table (OneOf), checked like numbers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import pytest

from probcl.config import VIEW_PRESETS, AugmentConfig, from_dict
from probcl.core.typed_config import OneOf
from probcl.errors import ConfigError

RECIPES = {"a": 1, "b": 2}


@dataclass
class Options:
    recipe: Annotated[str, OneOf(RECIPES)] = "a"
    fallback: Annotated[str | None, OneOf(RECIPES)] = None


def test_one_of_accepts_exactly_the_table_keys():
    assert from_dict(Options, {"recipe": "b"}).recipe == "b"
    assert from_dict(Options, {"fallback": None}).fallback is None
    with pytest.raises(ConfigError, match=r"^opts\.recipe must be one of a, b; got 'c'$"):
        from_dict(Options, {"recipe": "c"}, "opts")


def test_augment_presets_are_named_once():
    for name in VIEW_PRESETS:
        assert from_dict(AugmentConfig, {"preset": name}).preset == name
    with pytest.raises(ConfigError, match="augment.preset must be one of " + ", ".join(VIEW_PRESETS)):
        from_dict(AugmentConfig, {"preset": "simclr2"}, "augment")
