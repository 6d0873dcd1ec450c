"""Typed dataclass configs from plain data (torch-free): bounds declared on fields, one-line errors.

``from_dict(cls, data)`` converts plain YAML/JSON data into dataclass ``cls``, rejecting unknown keys, wrong
types and out-of-range values with one message that names the key and the valid choices. Bounds are
declared on the fields (``lr: Annotated[float, Positive] = 1e-3``, ``name: Annotated[str, OneOf(NAMES)]``),
so every options object (the run config, each method's Params, suite, score and sample options) is
validated by the same code. :mod:`probcl.config` holds probcl's own schema on top of it.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import yaml

from probcl.errors import ConfigError


def _number(value: float | None) -> str:
    """A bound as written in messages: whole numbers in full (4294967295, not 4.29e+09), others short."""
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


@dataclass(frozen=True)
class Bound:
    """A numeric range a config field must lie in; ``None`` values (unset options) always pass. Infinity lies in
    no range unless ``infinite_ok`` (a vMF concentration's ``.inf``: the deterministic limit)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    infinite_ok: bool = False

    def describe(self) -> str:
        """The range as the error message states it: ``> 0``, ``>= 1`` or ``in [0, 1)``."""
        low, high = _number(self.low), _number(self.high)
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {low}"
        if self.low is None:
            return f"{'<' if self.high_open else '<='} {high}"
        return f"in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"

    def check(self, key: str, value: float | None) -> None:
        """Raise ConfigError naming ``key`` and the range unless ``value`` lies in it."""
        if value is None:
            return
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        too_high = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        if too_low or too_high:
            raise ConfigError(f"{key} must be {self.describe()}, got {value}")
        if math.isinf(value) and not self.infinite_ok:
            raise ConfigError(f"{key} must be a finite number {self.describe()}, got {value}")


Positive = Bound(0.0, low_open=True)
PositiveOrInfinite = Bound(0.0, low_open=True, infinite_ok=True)
NonNegative = Bound(0.0)
Probability = Bound(0.0, 1.0)


def AtLeast(low: float) -> Bound:
    """Values >= ``low`` (counts: ``Annotated[int, AtLeast(1)]``)."""
    return Bound(low)


def InRange(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> Bound:
    """Values between ``low`` and ``high`` (``InRange(0, 1, high_open=True)``: [0, 1))."""
    return Bound(low, high, low_open, high_open)


@dataclass(frozen=True)
class OneOf:
    """A string field's valid values (``Annotated[str, OneOf(PRESETS)]``): the names live where their meaning
    does (a table of recipes), and the field accepts exactly those."""

    choices: tuple[str, ...]

    def __init__(self, choices: Iterable[str]) -> None:
        object.__setattr__(self, "choices", tuple(choices))

    def check(self, key: str, value: str | None) -> None:
        """Raise ConfigError naming ``key`` and the choices unless ``value`` is one of them."""
        if value is not None and value not in self.choices:
            raise ConfigError(f"{key} must be one of {', '.join(self.choices)}; got {value!r}")


def to_plain(obj: Any) -> Any:
    """Dataclasses and tuples -> dicts and lists (YAML/JSON friendly)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj


def dotted(tree: dict, prefix: str = "") -> dict:
    """Nested settings as {"section.key": value}."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _check_annotations(tp: Any, key: str, value: Any) -> None:
    """The bounds of an ``Annotated`` type (none for other types), checked on ``value``."""
    if typing.get_origin(tp) is Annotated:
        for bound in (a for a in typing.get_args(tp)[1:] if isinstance(a, (Bound, OneOf))):
            bound.check(key, value)


def _convert(value: Any, tp: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Annotated:
        converted = _convert(value, args[0], key)
        _check_annotations(tp, key, converted)
        return converted
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(value, arg, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{key}: invalid value {value!r}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key} must be one of {', '.join(map(str, args))}; got {value!r}")
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_dict(tp, value, key)
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ConfigError(f"{key} must be a list of {len(args)} values, got {value!r}")
        return tuple(_convert(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if origin is list:
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        elif isinstance(value, (int, float)):  # one value given for a list (`--option ood.knn_k=10`)
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key} must be a list, got {value!r}")
        return [_convert(v, args[0], f"{key}[{i}]") for i, v in enumerate(value)] if args else list(value)
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key} must be a mapping, got {value!r}")
        if len(args) == 2:  # typed values (dict[str, SomeDataclass]) are converted one by one
            return {k: _convert(v, args[1], f"{key}.{k}") for k, v in value.items()}
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ConfigError(f"{key} must be true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ConfigError(f"{key} must be an integer, got {value!r}")
        try:
            as_float = float(value)
        except ValueError:
            raise ConfigError(f"{key} must be an integer, got {value!r}") from None
        if not as_float.is_integer():
            raise ConfigError(f"{key} must be an integer, got {value!r}")
        return int(as_float)
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{key} must be a number, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key} must be a number, got {value!r}") from None
        if math.isnan(number):  # every range check would pass it (nan < 0 is false), and the run would fail later
            raise ConfigError(f"{key} must be a number, got {value!r} (not a number)")
        return number
    if tp is str:
        if not isinstance(value, (str, int, float)):
            raise ConfigError(f"{key} must be a string, got {value!r}")
        return str(value)
    return value


def from_dict(cls: type, data: dict | None, prefix: str = "", names: Mapping[str, str] | None = None) -> Any:
    """Build dataclass ``cls`` from ``data``, rejecting unknown keys and ill-typed values.

    Messages name a field ``prefix.field``, or ``names[field]`` where given (a command's flag: ``--num``).
    """
    data = {} if data is None else data
    if not isinstance(data, dict):
        if prefix:  # `--data imgs`, or `data: imgs` in YAML: a section given one value
            raise ConfigError(
                f"{prefix} must be a mapping, got {data!r}: it is a section; set its keys one by one "
                f"(--{prefix}.KEY VALUE, or KEY: VALUE under {prefix}: in YAML; --print-config lists them)"
            )
        raise ConfigError(f"config must be a mapping, got {data!r}")
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(
            f"unknown config key(s) {', '.join(where + k for k in unknown)}; "
            f"valid keys{' of ' + prefix if prefix else ''}: {', '.join(fields)}",
            keys=tuple(where + k for k in unknown),
        )
    missing = [
        name
        for name, f in fields.items()
        if name not in data and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(
            f"missing config key(s) {', '.join(where + k for k in missing)}; give a value for each",
            keys=tuple(where + k for k in missing),
        )
    names = names or {}
    kwargs = {}
    for k, v in data.items():
        key = f"{prefix}.{k}" if prefix else k
        try:
            kwargs[k] = _convert(v, hints[k], names.get(k) or key)
        except ConfigError as e:
            e.keys = e.keys or (key,)  # the innermost section's from_dict names the key
            raise
    return cls(**kwargs)


def check_bounds(obj: Any) -> None:
    """Check the bounds declared on the fields of dataclass instance ``obj`` (as :func:`from_dict` does), for an
    object built in code from values no :func:`from_dict` has seen; ConfigError naming the field otherwise."""
    hints = typing.get_type_hints(type(obj), include_extras=True)
    for f in dataclasses.fields(obj):
        _check_annotations(hints[f.name], f.name, getattr(obj, f.name))


def set_dotted(tree: dict, dotted: str, value: Any) -> None:
    """Set ``tree['a']['b'] = value`` for ``dotted='a.b'``, creating levels as needed (an empty YAML section,
    ``train:`` with nothing under it, is a level with no keys yet)."""
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            raise ConfigError(f"cannot set {dotted}: {part} is not a section")
    node[parts[-1]] = value


def parse_override_value(text: str) -> Any:
    """CLI override text -> YAML scalar/list (``0.2`` -> float, ``[0.5,1]`` -> list, ``true`` -> bool)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def parse_suite_options(items: list[str]) -> dict[str, dict]:
    """``["ood.datasets=digits,mnist", "knn.knn_k=20"]`` -> {"ood": {"datasets": "digits,mnist"}, "knn": {"knn_k": 20}}
    (values as YAML scalars; list options split ``a,b`` when validated); a dotted KEY sets a nested option
    (``linear.sgd.epochs=10`` -> {"linear": {"sgd": {"epochs": 10}}})."""
    options: dict[str, dict] = {}
    for item in items:
        key, sep, value = item.partition("=")
        suite, dot, name = key.partition(".")
        if not sep or not dot:
            raise ConfigError(f"suite option {item!r} must look like SUITE.KEY=VALUE")
        set_dotted(options.setdefault(suite, {}), name, parse_override_value(value))
    return options
