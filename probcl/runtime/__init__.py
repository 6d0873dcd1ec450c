"""Torch helpers every training and evaluation layer shares: devices, precision, DDP gathers (the torch-free
utilities are in :mod:`probcl.core`)."""
