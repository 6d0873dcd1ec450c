"""The vMF normaliser log C_n and mean resultant length A_n (scipy's Bessel functions) and row normalisation,
for the CEB loss and method tests."""

import math

import numpy as np
import scipy.special as sp
import torch


def log_c(n: int, kappa: float) -> float:
    """log C_n(kappa) = (n/2-1) log kappa - (n/2) log 2pi - log I_{n/2-1}(kappa), via scipy's ive."""
    return (
        (n / 2 - 1) * math.log(kappa) - (n / 2) * math.log(2 * math.pi) - (math.log(sp.ive(n / 2 - 1, kappa)) + kappa)
    )


def a_n(n: int, kappa: float) -> float:
    return sp.ive(n / 2, kappa) / sp.ive(n / 2 - 1, kappa)


def unit(x: torch.Tensor) -> np.ndarray:
    x = x.detach().numpy()
    return x / np.linalg.norm(x, axis=1, keepdims=True)
