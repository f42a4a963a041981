"""Measurements of trained runs (jax): the loader, the probes and their CLI."""
