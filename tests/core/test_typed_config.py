"""from_dict's field bounds: the names a string field accepts live in one table (OneOf), checked like numbers;
messages may name a command's flags; an object built in code is checked against the same declared bounds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import pytest

from probcl.config import VIEW_PRESETS, AugmentConfig, from_dict
from probcl.core.typed_config import AtLeast, InRange, OneOf, check_bounds
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


@dataclass
class Counted:
    count: Annotated[int, AtLeast(1)] = 1
    share: Annotated[float | None, InRange(0, 1, low_open=True)] = None
    recipe: Annotated[str, OneOf(RECIPES)] = "a"
    label: str = "any text"  # no bound


def test_messages_name_a_field_as_the_caller_spells_it():
    with pytest.raises(ConfigError, match=r"^--count must be >= 1, got 0$"):
        from_dict(Counted, {"count": 0}, names={"count": "--count"})
    with pytest.raises(ConfigError, match=r"^opts\.count must be >= 1, got 0$"):  # unnamed fields keep prefix.field
        from_dict(Counted, {"count": 0}, "opts", names={"share": "--share"})


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"count": 0}, r"^count must be >= 1, got 0$"),
        ({"share": 0.0}, r"^share must be in \(0, 1\], got 0\.0$"),
        ({"share": 1.5}, r"^share must be in \(0, 1\], got 1\.5$"),
        ({"recipe": "c"}, r"^recipe must be one of a, b; got 'c'$"),
    ],
)
def test_check_bounds_applies_the_declared_bounds_to_an_object_built_in_code(fields, message):
    with pytest.raises(ConfigError, match=message):
        check_bounds(Counted(**fields))


def test_check_bounds_passes_values_in_range_and_unset_options():
    for fields in ({}, {"count": 7, "share": 1.0, "recipe": "b"}, {"share": None, "label": ""}):
        check_bounds(Counted(**fields))  # no error


def test_errors_carry_the_dotted_keys_they_are_about():
    from probcl.config import load_config
    from probcl.methods import METHODS

    def keys(call):
        with pytest.raises(ConfigError) as e:
            call()
        return e.value.keys

    assert keys(lambda: from_dict(Counted, {"count": 0, "colour": 1, "size": 2}, "opts")) == (
        "opts.colour",
        "opts.size",
    )
    assert keys(lambda: from_dict(Counted, {"count": 0}, "opts", names={"count": "--count"})) == ("opts.count",)
    assert keys(lambda: from_dict(Counted, {"share": [0.5]})) == ("share",)
    assert keys(lambda: load_config(None, {"train.batch_size": 0})) == ("train.batch_size",)  # nested: innermost
    cfg = load_config(None, {"method_args": {"nope": 1}})
    assert keys(lambda: METHODS.get(cfg.method).params(cfg)) == ("method_args.nope",)
    assert ConfigError("said in words only").keys == ()


def test_an_override_sets_a_key_of_an_empty_yaml_section():
    """``train:`` with nothing under it is YAML's null: the section's defaults, and ``--train.epochs 1`` sets a key of
    it (it had said "train is not a section"); a section given a value is still refused."""
    import pytest

    from probcl.core.typed_config import set_dotted
    from probcl.errors import ConfigError

    tree: dict = {"method": "simclr", "train": None}
    set_dotted(tree, "train.epochs", 1)
    assert tree == {"method": "simclr", "train": {"epochs": 1}}
    with pytest.raises(ConfigError, match="cannot set method.x: method is not a section"):
        set_dotted(tree, "method.x", 1)
