"""Samplers that draw negatives or images from a model's density: VEM feature banks, image particles, EBCLR SGLD."""
