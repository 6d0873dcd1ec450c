"""Torch-free plumbing shared by every layer: run directories and locks, atomic I/O, registries, discovery, presets,
typed configs, progress, the names the CLI checks. Imports no torch (a contract in pyproject.toml)."""
