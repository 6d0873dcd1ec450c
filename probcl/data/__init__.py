"""Datasets (registry, in-memory and streamed sources), batched augmented views, corruptions and generated OOD sets."""
