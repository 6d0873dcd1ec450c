"""probcl: probabilistic contrastive self-supervised learning (VEM, EBCLR, TaU, CEB and baselines)."""
from probcl.core.runs import load

__version__ = "0.1.0"
__all__ = ["load", "__version__"]
