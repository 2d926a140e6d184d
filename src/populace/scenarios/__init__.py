"""Scenarios: complete simulations built on the lower layers (``guess_number`` …)."""
