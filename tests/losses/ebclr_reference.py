"""EBCLR's energy (Eq. 20) and discriminative term (Eq. 18) written plainly, for the loss, sampler and method tests."""

import math

import numpy as np


def unit(x):
    return x / np.linalg.norm(x)


def direct_energy(z, refs, tau):
    """Eq. 20 written plainly: -log sum_m exp(-||z/|z| - z'_m/|z'_m|||^2 / tau)."""
    return -math.log(sum(math.exp(-float(np.sum((unit(z) - unit(r)) ** 2)) / tau) for r in refs))


def direct_minus_log_q(z1, z2, tau, others):
    """Eq. 18: -log q(v'_n | v_n) with its 1/N' normaliser, averaged over both views as anchors."""
    views = [unit(v) for v in np.concatenate([z1, z2])]
    n = len(z1)
    total = []
    for i in range(2 * n):
        partner = (i + n) % (2 * n)
        if others == "2n-1":
            candidates = [k for k in range(2 * n) if k != i]
        else:  # the N views of the other side
            candidates = list(range(n, 2 * n)) if i < n else list(range(n))
        sim = lambda k, i=i: math.exp(-float(np.sum((views[i] - views[k]) ** 2)) / tau)  # noqa: E731
        total.append(-math.log(sim(partner) / (sum(sim(k) for k in candidates) / len(candidates))))
    return float(np.mean(total)), len(candidates)
