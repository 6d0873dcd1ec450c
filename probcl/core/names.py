"""Names the CLI and the config check before anything heavy is imported: precisions and feature layers."""

AUTO = "auto"  # precision: bf16-mixed on a CPU with native bf16, else 32-true (probcl.runtime.precision)
BF16 = "bf16-mixed"
FP32 = "32-true"
PRECISIONS = (AUTO, FP32, BF16)  # what evaluation takes (training takes any of Lightning's precision names)

FEATURE_LAYERS = ("backbone", "projection", "pixels")  # pixels: the raw-pixel baseline
