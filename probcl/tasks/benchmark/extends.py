"""``extends``: a benchmark config written as another one plus changes (e.g. a longer budget of the same study), so
that claims, suites, controls and headline are written once.

    extends: fashion-mnist/study                 # or {config: fashion-mnist/study, methods: [simclr, ebclr]}
    out: runs/study-fmnist-long
    overrides: {train.epochs: 30}

The base's tree (itself resolved first, when it extends another) is deep-merged under this file's keys: mappings
merge key by key (a key is never split at its dots: ``overrides: {train.epochs: 30}`` replaces the base's
``train.epochs``); lists, strings and numbers replace the base's; a null removes the base's key (``budgets: null``:
the default; ``suite_options: {lipschitz: null}``), except under ``overrides``, where null is a setting's value.
``methods`` is the grid, so it merges by label:

- ``extends.methods: [label, ...]`` keeps only those of the base's methods (``[]`` keeps none: this file's
  ``methods`` is then the whole grid); the base's ``controls`` that name a dropped method and its dropped
  ``seed_ensembles`` entries go with them;
- ``extends.claims: [name, ...]`` keeps only those of the base's claims (``[]`` keeps none: this file's
  ``claims`` are then all of them), e.g. a second class split whose OOD claims read another held-out set;
- an entry of this file's ``methods`` that names a preset (a path, or a mapping with ``config``) adds a method or
  replaces the base's entry of that label as a whole; an entry without ``config`` amends the base's entry
  (deep-merged into it, e.g. ``tau-posthoc: {overrides: {train.epochs: 10}}`` or ``moco: {phase: 2}``).

A base name is looked up beside the extending file first, then as a preset (``fashion-mnist/study``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from probcl.config import ConfigError
from probcl.core.io import read_yaml

EXTENDS_KEYS = {"config", "methods", "claims"}


def preset_path(name: str, base_dir: Path) -> Path:
    """A config named in another one: a file beside it (``base_dir / name``), else a path or preset name."""
    from probcl.core.presets import resolve_config_path

    local = base_dir / name
    path = local if local.is_file() else resolve_config_path(name)
    assert path is not None  # a name was given
    return Path(path)


def read_tree(path: Path, what: str = "config") -> dict:
    """A YAML file's mapping (empty for an empty file); one ConfigError line when it is not valid YAML."""
    tree = read_yaml(path, what) or {}
    if not isinstance(tree, dict):
        raise ConfigError(f"{what} {path} must be a mapping of keys, got {type(tree).__name__}")
    return tree


def deep_merge(base: dict, top: dict, null_removes: bool = False) -> dict:
    """A new mapping: ``top``'s keys over ``base``'s, mappings merged key by key (keys taken as they are, dots
    included), anything else replaced; with ``null_removes``, a null in ``top`` removes the base's key (except
    under ``overrides``, where null is a setting's value)."""
    merged = copy.deepcopy(base)
    for key, value in top.items():
        if value is None and null_removes:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value, null_removes and key != "overrides")
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _names(value: Any) -> bool:
    return value is None or (isinstance(value, list) and all(isinstance(m, str) for m in value))


def _extends_spec(spec: Any, where: str) -> tuple[str, list[str] | None, list[str] | None]:
    """(base name, the base's methods to keep, the base's claims to keep; None: all) of an ``extends`` value."""
    if isinstance(spec, str):
        return spec, None, None
    if isinstance(spec, dict) and isinstance(spec.get("config"), str) and not set(spec) - EXTENDS_KEYS:
        if _names(spec.get("methods")) and _names(spec.get("claims")):
            return spec["config"], spec.get("methods"), spec.get("claims")
    raise ConfigError(
        f"{where}: extends must be a benchmark config name or "
        f"{{config: NAME, methods: [label, ...], claims: [name, ...]}}, got {spec!r}"
    )


def keep_methods(base: dict, keep: list[str], where: str) -> dict:
    """``base`` with only the ``keep`` methods, and only the controls, seed ensembles and sweeps that name no other."""
    methods = base.get("methods") or {}
    unknown = [m for m in keep if m not in methods]
    if unknown:
        raise ConfigError(
            f"{where}: extends.methods names {', '.join(unknown)}, not a method of the base "
            f"(its methods: {', '.join(methods)}); remove it or add it under methods"
        )
    kept = dict(base, methods={m: methods[m] for m in methods if m in keep})
    if "controls" in base:
        kept["controls"] = {
            label: control
            for label, control in (base["controls"] or {}).items()
            if label in keep and all(m in keep for m in (control or {}).get("against") or [])
        }
    if "seed_ensembles" in base:
        kept["seed_ensembles"] = [m for m in base["seed_ensembles"] or [] if m in keep]
    if "sweeps" in base:
        kept["sweeps"] = {label: ms for label, ms in (base["sweeps"] or {}).items() if all(m in keep for m in ms)}
    return kept


def _names_a_preset(entry: Any) -> bool:
    return isinstance(entry, str) or (isinstance(entry, dict) and "config" in entry)


def merge_methods(base: dict, own: dict, where: str) -> dict:
    """The base's methods with this file's entries: a preset adds or replaces a label, a mapping without
    ``config`` amends the base's entry of its label."""
    if not isinstance(own, dict):
        raise ConfigError(f"{where}: methods must be a mapping of label -> preset, got {type(own).__name__}")
    merged = dict(base)
    for label, entry in own.items():
        if _names_a_preset(entry):
            merged[label] = entry
            continue
        if label not in base or not isinstance(entry, dict):
            raise ConfigError(
                f"{where}: methods.{label} names no preset and the base has no method {label!r} to amend; "
                "give it config: PRESET"
            )
        current = {"config": base[label]} if isinstance(base[label], str) else base[label]
        merged[label] = deep_merge(current, entry)
    return merged


def resolve_extends(tree: dict, path: Path, chain: tuple[Path, ...] = ()) -> dict:
    """The config ``tree`` read from ``path`` with its ``extends`` applied (see the module docstring)."""
    if "extends" not in tree:
        return tree
    where = str(path)
    name, keep, keep_claims = _extends_spec(tree["extends"], where)
    base_path = preset_path(name, path.parent)
    seen = (*chain, path.resolve())
    if base_path.resolve() in seen:
        cycle = " -> ".join(str(p) for p in (*seen, base_path.resolve()))
        raise ConfigError(f"{where}: extends goes round in a circle ({cycle}); remove one of these extends")
    base = resolve_extends(read_tree(base_path, "benchmark file"), base_path, seen)
    if keep is not None:
        base = keep_methods(base, keep, where)
    if keep_claims is not None:
        claims = base.get("claims") or {}
        unknown = [c for c in keep_claims if c not in claims]
        if unknown:
            raise ConfigError(f"{where}: extends.claims names {', '.join(unknown)}, not a claim of the base")
        base = dict(base, claims={c: claims[c] for c in claims if c in keep_claims})
    own = {k: v for k, v in tree.items() if k not in ("extends", "methods")}
    merged = deep_merge(base, own, null_removes=True)
    merged["methods"] = merge_methods(base.get("methods") or {}, tree.get("methods") or {}, where)
    return merged
