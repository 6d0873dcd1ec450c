"""The feature layers evaluation measures, torch-free so that the CLI can check ``--features`` before any import."""

FEATURE_LAYERS = ("backbone", "projection", "pixels")  # pixels: the raw-pixel baseline
