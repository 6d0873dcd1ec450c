"""Probability distributions on the sphere (von Mises-Fisher) and the special functions they need."""
