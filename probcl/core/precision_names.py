"""The precision names probcl speaks of (Lightning's spelling), torch-free so that the CLI can offer them."""

AUTO = "auto"  # bf16-mixed where the device computes bf16 natively, else 32-true (probcl.core.precision)
BF16 = "bf16-mixed"
FP32 = "32-true"
PRECISIONS = (AUTO, FP32, BF16)  # what evaluation takes (training takes any of Lightning's precision names)
