"""Energies with a known gradient for the sampler tests."""


def quadratic_energy(target, c):
    return lambda v: 0.5 * c * (v - target).square().flatten(1).sum(1)
