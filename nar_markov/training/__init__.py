"""Training (jax): the entry point, the loop, devices and the lambda calibration."""
