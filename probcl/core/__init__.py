"""Plumbing shared by every task: run directories, atomic I/O, registries, discovery, presets, DDP helpers, progress."""
