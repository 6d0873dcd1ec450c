"""The runs layer: loading runs and exports back, and the training runtime (exact resume, loggers, metrics)."""
