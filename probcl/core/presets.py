"""YAML presets shipped with the package (``probcl/presets/<dataset>/<method>.yaml``), found by name.

A preset's first line is a comment that says what it is for in one line (``probcl list presets`` shows it).
"""

from __future__ import annotations

from pathlib import Path

from probcl.errors import ConfigError

PRESETS_DIR = Path(__file__).resolve().parent.parent / "presets"


def presets_dirs() -> list[Path]:
    """Folders searched for presets: ``./configs`` (a user's own, first), then the package's presets."""
    return [Path.cwd() / "configs", PRESETS_DIR]


def list_presets() -> list[str]:
    """Preset names (``fashion-mnist/simclr``, ...), a user's own first."""
    seen: dict[str, None] = {}
    for folder in presets_dirs():
        if folder.is_dir():
            for path in sorted(folder.rglob("*.yaml")):
                seen.setdefault(str(path.relative_to(folder).with_suffix("")), None)
    return list(seen)


def preset_description(name: str) -> str:
    """The one-line description of preset ``name``: its first line, a ``#`` comment ("" when it has none)."""
    path = resolve_config_path(name)
    assert path is not None  # a name was given
    with path.open() as file:
        first = file.readline().strip()
    return first[1:].strip() if first.startswith("#") else ""


def resolve_config_path(name: str | None) -> Path | None:
    """A config path as given, or a preset name like ``fashion-mnist/simclr``."""
    if name is None or Path(name).is_file():
        return None if name is None else Path(name)
    for folder in presets_dirs():
        candidate = folder / (name if name.endswith(".yaml") else f"{name}.yaml")
        if candidate.is_file():
            return candidate
    if Path(name).exists():  # a folder, a device: there, but not a YAML file
        kind = "a folder" if Path(name).is_dir() else "not a regular file"
        raise ConfigError(f"config {name} is {kind}; pass a YAML file, or a preset name (`probcl list presets`)")
    raise ConfigError(f"config {name} not found (neither a file nor a preset); presets: {', '.join(list_presets())}")
